// Trying a stop window again when no thread of the target could take a
// remote call in it (map_window.h, frames_registration.h).
//
// A server's single-threaded worker (a postgres backend, a pre-forked
// worker) spends most of its time asleep where no call can be run: in
// nanosleep (a restart through restart_block), in a call that holds a
// temporary signal mask. The next window may find it running. The pauses
// between windows are uneven, so that a target that sleeps with a fixed
// period is not met at the same point of it each time; they add up to about
// 2.1 s. Each window stops every thread (an epoll_wait sees EINTR, as after
// any stop), and one that finds no thread may have unwound them all: the
// windows that found none may hold the target kWindowRetryBudget in all,
// however many they are.
#pragma once

#include <array>
#include <chrono>
#include <thread>

namespace dyni::inject {

inline constexpr std::array<int, 29> kWindowRetryPauseMs = {23, 61, 37, 89, 47, 113, 29, 71, 53, 131, 41, 97, 31, 83, 59,
                                                            107, 43, 67, 139, 19, 79, 101, 33, 127, 57, 73, 151, 27, 91};
inline constexpr std::chrono::milliseconds kWindowRetryBudget{250};

// Runs `window` until it returns something other than `busy(result)`
// (no thread could take a call, nothing done), at most 30 times and while
// the busy windows together took less than kWindowRetryBudget.
template <typename Window, typename Busy>
auto retry_window(Window window, Busy busy) {
  std::chrono::steady_clock::duration held{};
  for (std::size_t attempt = 0;; ++attempt) {
    auto t0 = std::chrono::steady_clock::now();
    auto result = window();
    held += std::chrono::steady_clock::now() - t0;
    if (!busy(result) || attempt == kWindowRetryPauseMs.size() || held >= kWindowRetryBudget) return result;
    std::this_thread::sleep_for(std::chrono::milliseconds(kWindowRetryPauseMs[attempt]));
  }
}

}  // namespace dyni::inject
