// A mutex that spins briefly before it sleeps (glibc's adaptive pthread mutex). The
// scheduler's lock is held for short stretches by the submitting thread and the executors
// at once; a plain futex mutex would put one of them to sleep and pay a wake-up for every
// task. Use with std::condition_variable_any.
#pragma once

#include <pthread.h>

namespace gridspan {

class AdaptiveMutex {
 public:
  AdaptiveMutex() {
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
#ifdef PTHREAD_ADAPTIVE_MUTEX_INITIALIZER_NP
    pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_ADAPTIVE_NP);
#endif
    pthread_mutex_init(&m_, &attr);
    pthread_mutexattr_destroy(&attr);
  }
  ~AdaptiveMutex() {
    pthread_mutex_destroy(&m_);
  }
  AdaptiveMutex(const AdaptiveMutex&) = delete;
  AdaptiveMutex& operator=(const AdaptiveMutex&) = delete;
  void lock() {
    pthread_mutex_lock(&m_);
  }
  void unlock() {
    pthread_mutex_unlock(&m_);
  }
  bool try_lock() {
    return pthread_mutex_trylock(&m_) == 0;
  }

 private:
  pthread_mutex_t m_;
};

}  // namespace gridspan
