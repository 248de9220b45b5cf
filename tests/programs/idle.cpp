// An idle target: sleeps for at most SECONDS seconds, using no CPU.
// usage: dyni-test-idle [SECONDS=30]
#include <unistd.h>

#include <cstdlib>

int main(int argc, char** argv) {
  int seconds = argc > 1 ? std::atoi(argv[1]) : 30;
  for (int i = 0; i < seconds * 10; ++i) usleep(100 * 1000);
  return 0;
}
