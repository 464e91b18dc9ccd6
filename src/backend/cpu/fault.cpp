// The cpu kernels' fault report (see fault.hpp). The handler may use async-signal-safe calls
// only: it formats into a stack buffer and write()s it.
#include "backend/cpu/fault.hpp"

#include <signal.h>
#include <unistd.h>

#include <cstring>
#include <mutex>

namespace gridspan::backend::cpu {

namespace {

thread_local const RunningKernel* t_running = nullptr;
struct sigaction g_previous_segv, g_previous_bus;

// Appends to a fixed buffer (drops what does not fit).
struct Line {
  char text[512];
  std::size_t n = 0;
  void add(const char* s) {
    while (*s && n < sizeof text) text[n++] = *s++;
  }
  void add(int64_t v) {
    char digits[24];
    int k = 0;
    const bool negative = v < 0;
    uint64_t u = negative ? 0 - static_cast<uint64_t>(v) : static_cast<uint64_t>(v);
    do digits[k++] = static_cast<char>('0' + u % 10);
    while ((u /= 10) && k < 23);
    if (negative) add("-");
    while (k > 0 && n < sizeof text) text[n++] = digits[--k];
  }
};

void report(const RunningKernel& k, int sig) {
  Line line;
  line.add("gridspan: ");
  line.add(sig == SIGBUS ? "a bus error" : "a segmentation fault");
  line.add(" in kernel `");
  line.add(k.kernel ? k.kernel : "?");
  line.add("` on cpu:");
  line.add(static_cast<int64_t>(k.device));
  line.add(", in the superblock of blocks [");
  for (int ax = 0; ax < 3; ++ax) {
    if (ax && k.hi[ax] - k.lo[ax] == 1 && k.lo[ax] == 0) break;  // the unused axes
    if (ax) line.add(") x [");
    line.add(k.lo[ax]);
    line.add("..");
    line.add(k.hi[ax]);
  }
  line.add(
      "): the kernel accessed memory outside its arrays. Run it with GRIDSPAN_CHECK=1 "
      "to find the access outside its declared access region\n");
  [[maybe_unused]] ssize_t w = ::write(STDERR_FILENO, line.text, line.n);
}

void on_fault(int sig, siginfo_t* info, void* context) {
  if (const RunningKernel* k = t_running) report(*k, sig);
  const struct sigaction& previous = sig == SIGBUS ? g_previous_bus : g_previous_segv;
  if ((previous.sa_flags & SA_SIGINFO) && previous.sa_sigaction) {
    previous.sa_sigaction(sig, info, context);
    return;
  }
  if (previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN && previous.sa_handler) {
    previous.sa_handler(sig);
    return;
  }
  // The default: back to it, and the faulting access runs again and ends the process.
  ::sigaction(sig, &previous, nullptr);
}

}  // namespace

RunningKernel::RunningKernel(const char* name, int dev, const GsLaunch& launch) noexcept
    : kernel(name), device(dev), outer_(t_running) {
  for (int ax = 0; ax < 3; ++ax) lo[ax] = launch.block_lo[ax], hi[ax] = launch.block_hi[ax];
  t_running = this;
}

RunningKernel::~RunningKernel() {
  t_running = outer_;
}

void install_fault_report() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction action;
    std::memset(&action, 0, sizeof action);
    action.sa_sigaction = on_fault;
    action.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
    sigemptyset(&action.sa_mask);
    ::sigaction(SIGSEGV, &action, &g_previous_segv);
    ::sigaction(SIGBUS, &action, &g_previous_bus);
  });
}

}  // namespace gridspan::backend::cpu
