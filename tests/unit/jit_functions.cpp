// Real compiled functions for jit tests: their CFGs are checked in jit_test.cpp.
// Built with -O2 so the switch becomes a jump table.
extern "C" {

// Distinct work per case, so the compiler needs a jump table (a switch that
// only returns constants becomes a lookup table instead).
__attribute__((noinline)) int jit_switch(int x, int y) {
  switch (x) {
    case 0: return y * 11;
    case 1: return y + 23;
    case 2: return y ^ 37;
    case 3: return y / 3 + 41;
    case 4: return y << 5;
    case 5: return y % 7 - 61;
    case 6: return ~y;
    case 7: return y * y;
    default: return -1;
  }
}

__attribute__((noinline)) long jit_loop(const int* v, int n) {
  long sum = 0;
  for (int i = 0; i < n; ++i) sum += v[i] * (i & 3 ? 1 : 2);
  return sum;
}

}
