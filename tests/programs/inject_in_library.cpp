// dyni-test-inject-in-library: dyni-test-inject with all its code in a
// shared library, libdyni-test-inject.so (inject_target.cpp), for live
// injection into a library's hot code.
extern "C" int dyni_test_inject_main();

int main() { return dyni_test_inject_main(); }
