// Names the calling thread as top -H, gdb and perf show it (at most 15 characters).
#pragma once

#include <pthread.h>

namespace gridspan {

inline void name_this_thread(const char* name) {
  pthread_setname_np(pthread_self(), name);
}

}  // namespace gridspan
