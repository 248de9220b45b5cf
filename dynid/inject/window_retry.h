// Trying a stop window again when no thread of the target could take a
// remote call in it (map_window.h, frames_registration.h).
//
// A server's single-threaded worker (a postgres backend, a pre-forked
// worker) spends most of its time asleep where no call can be run: in
// nanosleep (a restart through restart_block), in epoll_wait (never
// restarted). The next window may find it running. The pauses between
// windows are uneven, so that a target that sleeps with a fixed period is
// not met at the same point of it each time; they add up to about 2.1 s,
// and each window is as short as one that succeeds.
#pragma once

#include <array>
#include <chrono>
#include <thread>

namespace dyni::inject {

inline constexpr std::array<int, 29> kWindowRetryPauseMs = {23, 61, 37, 89, 47, 113, 29, 71, 53, 131, 41, 97, 31, 83, 59,
                                                            107, 43, 67, 139, 19, 79, 101, 33, 127, 57, 73, 151, 27, 91};

// Runs `window` until it returns something other than `busy(result)`
// (no thread could take a call, nothing done), at most 30 times.
template <typename Window, typename Busy>
auto retry_window(Window window, Busy busy) {
  for (std::size_t attempt = 0;; ++attempt) {
    auto result = window();
    if (!busy(result) || attempt == kWindowRetryPauseMs.size()) return result;
    std::this_thread::sleep_for(std::chrono::milliseconds(kWindowRetryPauseMs[attempt]));
  }
}

}  // namespace dyni::inject
