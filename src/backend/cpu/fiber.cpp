// The fiber runner behind __syncthreads on the cpu backend: one fiber per thread of a
// block, all on the calling OS thread, switched round robin at each barrier. It lives in
// the library (built with the project's sanitizers, whose fiber annotations it makes);
// generated kernels reach it through GsCpuRuntime.
//
// Barrier semantics: a round resumes every unfinished fiber in thread order; each runs to
// its next __syncthreads or to its end. A fiber that returned counts as arrived, and
// barriers at different call sites count as the same barrier (divergent barriers are
// undefined in CUDA; here they never hang).
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <vector>

#include "backend/cpu/cpu.hpp"

#if !defined(__x86_64__)
#include <ucontext.h>
#endif

#if defined(__SANITIZE_ADDRESS__)
#define GRIDSPAN_FIBER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define GRIDSPAN_FIBER_ASAN 1
#endif
#endif
#ifdef GRIDSPAN_FIBER_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

#if defined(__x86_64__)
// gridspan_fiber_switch(save_sp, load_sp): saves the callee-saved registers and the
// floating-point control words on the current stack, stores the stack pointer in
// *save_sp, and resumes the context whose stack pointer is load_sp.
extern "C" void gridspan_fiber_switch(void** save_sp, void* load_sp);
asm(R"(
  .text
  .globl gridspan_fiber_switch
  .hidden gridspan_fiber_switch
  .type gridspan_fiber_switch,@function
gridspan_fiber_switch:
  .cfi_startproc
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $16, %rsp
  stmxcsr 8(%rsp)
  fnstcw (%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr 8(%rsp)
  fldcw (%rsp)
  addq $16, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .cfi_endproc
  .size gridspan_fiber_switch,.-gridspan_fiber_switch
)");
#endif

namespace gridspan::backend::cpu {
namespace {

constexpr std::size_t kStackBytes = std::size_t(64) << 10;

struct Context {
#if defined(__x86_64__)
  void* sp = nullptr;
#else
  ucontext_t uc;
#endif
};

struct Fiber {
  Context context;
  char* stack = nullptr;  // usable [stack, stack + kStackBytes), a guard page below
  bool finished = false;
  bool abandoned = false;  // left mid-run after another fiber threw
  void* fake_stack = nullptr;
};

// One block's fibers while run_fibers runs them.
struct Group {
  void (*body)(void*, int32_t);
  void* arg;
  int32_t current;
  Fiber* fiber;  // the one running
  Context main;
  const void* main_bottom = nullptr;
  std::size_t main_size = 0;
  void* main_fake_stack = nullptr;
  std::exception_ptr error;
};

// The fibers (and their stacks) of one OS thread, reused by block after block.
struct FiberPool {
  std::vector<std::unique_ptr<Fiber>> fibers;
  std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));

  void reserve(int32_t count) {
    while (fibers.size() < static_cast<std::size_t>(count)) {
      void* p = mmap(nullptr, kStackBytes + page, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (p == MAP_FAILED) throw std::bad_alloc();
      mprotect(p, page, PROT_NONE);  // a stack overflow faults instead of corrupting memory
      auto f = std::make_unique<Fiber>();
      f->stack = static_cast<char*>(p) + page;
      fibers.push_back(std::move(f));
    }
  }
  ~FiberPool() {
    for (auto& f : fibers) munmap(f->stack - page, kStackBytes + page);
  }
};

thread_local FiberPool t_pool;
thread_local Group* t_group = nullptr;

inline void start_switch([[maybe_unused]] void** fake_stack_save,
                         [[maybe_unused]] const void* bottom, [[maybe_unused]] std::size_t size) {
#ifdef GRIDSPAN_FIBER_ASAN
  __sanitizer_start_switch_fiber(fake_stack_save, bottom, size);
#endif
}
inline void finish_switch([[maybe_unused]] void* fake_stack_save,
                          [[maybe_unused]] const void** bottom_old,
                          [[maybe_unused]] std::size_t* size_old) {
#ifdef GRIDSPAN_FIBER_ASAN
  __sanitizer_finish_switch_fiber(fake_stack_save, bottom_old, size_old);
#endif
}

inline void jump(Context& from, Context& to) {
#if defined(__x86_64__)
  gridspan_fiber_switch(&from.sp, to.sp);
#else
  swapcontext(&from.uc, &to.uc);
#endif
}

// Runs the body of the current fiber; returns normally so that its frame is cleaned up.
void run_current(Group* g) {
  try {
    g->body(g->arg, g->current);
  } catch (...) {
    if (!g->error) g->error = std::current_exception();
  }
}

// First frame of every fiber; never returns (it switches back to the scheduler for good).
#ifdef GRIDSPAN_FIBER_ASAN
__attribute__((no_sanitize_address))
#endif
[[noreturn]] void
fiber_entry() {
  Group* g = t_group;
  finish_switch(nullptr, &g->main_bottom, &g->main_size);
  run_current(g);
  g = t_group;  // the same group; reread after the body's switches
  Fiber* f = g->fiber;
  f->finished = true;
  start_switch(nullptr, g->main_bottom, g->main_size);  // this fiber's fake stack may go
  jump(f->context, g->main);
  __builtin_unreachable();
}

void prepare(Fiber& f) {
#ifdef GRIDSPAN_FIBER_ASAN
  if (f.abandoned) __asan_unpoison_memory_region(f.stack, kStackBytes);
#endif
  f.finished = false;
  f.abandoned = false;
  f.fake_stack = nullptr;
#if defined(__x86_64__)
  // The frame gridspan_fiber_switch pops: control words, six registers, and fiber_entry as
  // the return address, placed so that fiber_entry starts with the stack aligned as after
  // a call.
  auto top = reinterpret_cast<uintptr_t>(f.stack + kStackBytes) & ~uintptr_t(15);
  auto* frame = reinterpret_cast<uint64_t*>(top - 80);
  std::memset(frame, 0, 80);
  uint16_t fpu_cw;
  asm volatile("fnstcw %0" : "=m"(fpu_cw));
  uint32_t mxcsr;
  asm volatile("stmxcsr %0" : "=m"(mxcsr));
  std::memcpy(reinterpret_cast<char*>(frame), &fpu_cw, sizeof fpu_cw);
  std::memcpy(reinterpret_cast<char*>(frame) + 8, &mxcsr, sizeof mxcsr);
  frame[8] = reinterpret_cast<uint64_t>(&fiber_entry);
  frame[9] = 0;  // fiber_entry's return address: it never returns
  f.context.sp = frame;
#else
  getcontext(&f.context.uc);
  f.context.uc.uc_stack.ss_sp = f.stack;
  f.context.uc.uc_stack.ss_size = kStackBytes;
  f.context.uc.uc_link = nullptr;
  makecontext(&f.context.uc, &fiber_entry, 0);
#endif
}

}  // namespace

void run_fibers(int32_t count, void (*body)(void* arg, int32_t thread), void* arg) {
  if (count <= 0) return;
  if (t_group) {  // cannot happen from generated code; fail loudly rather than corrupt
    throw std::logic_error("gridspan: run_fibers called from inside a fiber");
  }
  FiberPool& pool = t_pool;
  pool.reserve(count);
  Group g;
  g.body = body;
  g.arg = arg;
  for (int32_t i = 0; i < count; ++i) prepare(*pool.fibers[i]);
  t_group = &g;
  int32_t remaining = count;
  while (remaining > 0 && !g.error) {
    for (int32_t i = 0; i < count && !g.error; ++i) {
      Fiber& f = *pool.fibers[i];
      if (f.finished) continue;
      g.current = i;
      g.fiber = &f;
      start_switch(&g.main_fake_stack, f.stack, kStackBytes);
      jump(g.main, f.context);
      finish_switch(g.main_fake_stack, nullptr, nullptr);
      if (f.finished) --remaining;
    }
  }
  t_group = nullptr;
  if (g.error) {
    // The other fibers stay where they are; their stacks are reset on next use.
    for (int32_t i = 0; i < count; ++i) {
      Fiber& f = *pool.fibers[i];
      if (!f.finished) f.abandoned = true;
    }
    std::rethrow_exception(g.error);
  }
}

void fiber_barrier() {
  Group* g = t_group;
  if (!g) return;  // not in a fiber: a block of one thread has nobody to wait for
  Fiber* f = g->fiber;
  start_switch(&f->fake_stack, g->main_bottom, g->main_size);
  jump(f->context, g->main);
  finish_switch(f->fake_stack, &g->main_bottom, &g->main_size);
}

const GsCpuRuntime* fiber_runtime() {
  static const GsCpuRuntime runtime = {GRIDSPAN_ABI_VERSION, 0, &run_fibers, &fiber_barrier};
  return &runtime;
}

}  // namespace gridspan::backend::cpu
