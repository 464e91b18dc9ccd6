// The same shapes as bench/overhead.cpp, in StarPU 1.3: empty tasks with no data, tasks each
// touching their own piece of a vector, and a chain of dependent tasks on one handle.
#include <starpu.h>

#include <chrono>
#include <vector>

#include "starpu_overhead.hpp"

namespace {

void empty_func(void**, void*) {}

starpu_codelet make_codelet(int nbuffers) {
  starpu_codelet cl;
  starpu_codelet_init(&cl);
  cl.cpu_funcs[0] = empty_func;
  cl.nbuffers = nbuffers;
  if (nbuffers) cl.modes[0] = STARPU_RW;
  return cl;
}

}  // namespace

namespace bench {

StarpuSession::StarpuSession(int workers) {
  starpu_conf conf;
  starpu_conf_init(&conf);
  conf.ncpus = workers;
  conf.ncuda = 0;
  conf.nopencl = 0;
  ok = starpu_init(&conf) == 0;
}
StarpuSession::~StarpuSession() {
  if (ok) starpu_shutdown();
}

double starpu_seconds_per_task(StarpuShape shape, int tasks) {
  auto t0 = std::chrono::steady_clock::now();
  if (shape == StarpuShape::empty) {
    static starpu_codelet cl = make_codelet(0);
    for (int i = 0; i < tasks; ++i) starpu_task_insert(&cl, 0);
    starpu_task_wait_for_all();
  } else if (shape == StarpuShape::own_chunk) {
    static starpu_codelet cl = make_codelet(1);
    std::vector<float> data(tasks);
    std::vector<starpu_data_handle_t> h(tasks);
    for (int i = 0; i < tasks; ++i)
      starpu_vector_data_register(&h[i], STARPU_MAIN_RAM, (uintptr_t)&data[i], 1, sizeof(float));
    t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < tasks; ++i) starpu_task_insert(&cl, STARPU_RW, h[i], 0);
    starpu_task_wait_for_all();
    auto t1 = std::chrono::steady_clock::now();
    for (auto& x : h) starpu_data_unregister(x);
    return std::chrono::duration<double>(t1 - t0).count() / tasks;
  } else {
    static starpu_codelet cl = make_codelet(1);
    float x = 0;
    starpu_data_handle_t h;
    starpu_variable_data_register(&h, STARPU_MAIN_RAM, (uintptr_t)&x, sizeof(float));
    t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < tasks; ++i) starpu_task_insert(&cl, STARPU_RW, h, 0);
    starpu_task_wait_for_all();
    auto t1 = std::chrono::steady_clock::now();
    starpu_data_unregister(h);
    return std::chrono::duration<double>(t1 - t0).count() / tasks;
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / tasks;
}

}  // namespace bench
