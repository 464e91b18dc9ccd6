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
//   failure_program catch  -1       the task throws on every rank; the program catches the
//                                   error once and carries on: every rank exits with 0
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
                                            if (this_rank() == g_victim || g_victim < 0) {
                                              if (g_mode == "throw" || g_mode == "catch")
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

// The same without failing: every element its index.
gs::NativeDef index_of() {
  auto def = gs::NativeDef::from_function("index_of",
                                          [](const gs::NativeContext& nc, gs::Vector<int> out) {
                                            gs::Rect r = nc.threads({1 << 20});
                                            for (int64_t i = r.lo[0]; i < r.hi[0]; ++i)
                                              out[i] = static_cast<int>(i);
                                          },
                                          {"out"});
  def.annotate("global i => write out[i]");
  return def;
}

// A launch fails on every rank; the program hears of it once, handles it and goes on.
void catch_and_carry_on(gs::Context& ctx) {
  const int n = 64 * ctx.device_count();
  auto out = ctx.full<int>({n}, -1, gs::dist::rows(64));
  ctx.compile(touch()).launch({n}, {1}, gs::work::tiles({64}), out);
  try {
    out.to_vector();
    throw gs::Error("the failed launch was not reported");
  } catch (const gs::Error& e) {
    std::printf("caught: %s\n", e.what());
  }
  auto fresh = ctx.full<int>({n}, -1, gs::dist::rows(64));
  ctx.compile(index_of()).launch({n}, {1}, gs::work::tiles({64}), fresh);
  auto v = fresh.to_vector();
  for (int i = 0; i < n; ++i)
    if (v[i] != i) throw gs::Error("element " + std::to_string(i) + " is wrong after the failure");
  ctx.synchronize();
  std::printf("carried on after the failure (%d ranks)\n", static_cast<int>(ctx.ranks().size()));
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
  gs::register_native(index_of());
  if (g_mode == "catch") return gs::run(argc, argv, catch_and_carry_on);
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
