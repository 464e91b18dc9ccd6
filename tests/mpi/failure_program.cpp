// A gridspan program for the failure tests under mpirun: a native function runs on every
// device of every rank, and on rank `victim` it fails in the way asked:
//   failure_program throw  VICTIM   the task throws: the driver reports it naming the rank
//                                   and task, and every rank exits with code 1
//   failure_program stop   VICTIM   the rank stops (SIGSTOP): the driver fails within
//                                   GRIDSPAN_NET_TIMEOUT naming it, and every rank ends
//   failure_program kill   VICTIM   the rank dies (SIGKILL): every rank ends
//   failure_program none   0        nothing fails: every rank exits with code 0
//   failure_program context 0       every rank makes a gs::Context itself (no gs::run): the
//                                   other ranks say that only rank 0 runs the program
#include <csignal>
#include <cstdio>
#include <cstring>
#include <string>

#include "gridspan/gridspan.hpp"
#include "runtime/process.hpp"

namespace gs = gridspan;

namespace {

std::string g_mode = "none";
int g_victim = -1;

int this_rank() {
  return gs::runtime::Process::distributed() ? gs::runtime::Process::get().rank() : 0;
}

gs::NativeDef touch() {
  auto def = gs::NativeDef::from_function("touch",
                                          [](const gs::NativeContext& nc, gs::Vector<int> out) {
                                            if (this_rank() == g_victim) {
                                              if (g_mode == "throw")
                                                throw gs::Error("deliberate failure in a task");
                                              if (g_mode == "stop") std::raise(SIGSTOP);
                                              if (g_mode == "kill") std::raise(SIGKILL);
                                            }
                                            gs::Rect r = nc.threads({1 << 20});
                                            for (int64_t i = r.lo[0]; i < r.hi[0]; ++i)
                                              out[i] = static_cast<int>(i) + this_rank();
                                          },
                                          {"out"});
  def.annotate("global i => write out[i]");
  return def;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: failure_program throw|stop|kill|none VICTIM\n");
    return 2;
  }
  g_mode = argv[1];
  g_victim = std::atoi(argv[2]);
  gs::register_native(touch());  // in every process, before gs::run
  if (g_mode == "context") {
    try {
      gs::Context ctx;
      std::printf("rank %d has a context\n", this_rank());
      return 0;
    } catch (const gs::Error& e) {
      std::fprintf(stderr, "gridspan error: %s\n", e.what());
      return 1;
    }
  }
  return gs::run(argc, argv, [](gs::Context& ctx) {
    const int devices = ctx.device_count();
    const int n = 64 * devices;
    auto out = ctx.full<int>({n}, -1, gs::dist::rows(64));
    auto k = ctx.compile(touch());
    k.launch({n}, {1}, gs::work::tiles({64}), out);
    auto v = out.to_vector();
    int wrong = 0;
    int device = 0;
    for (const auto& r : ctx.ranks())
      for (std::size_t d = 0; d < r.devices.size(); ++d, ++device)
        for (int i = device * 64; i < device * 64 + 64; ++i) wrong += v[i] != i + r.rank;
    if (wrong) throw gs::Error(std::to_string(wrong) + " elements are wrong");
    std::printf("every element was written on its rank (%d ranks, %d devices)\n",
                static_cast<int>(ctx.ranks().size()), devices);
  });
}
