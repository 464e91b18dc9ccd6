// Planner: which tasks a launch gives, and the dependencies between them.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include <fmt/format.h>
#include "gridspan/core/error.hpp"
#include "plan/plan_support.hpp"
#include "plan/planner.hpp"
#include "plan/records.hpp"
#include "support/random.hpp"

namespace gridspan::plan {
namespace {

using test_support::Nothing;
using test_support::vec;

struct Fixture {
  int devices;
  Planner planner;
  std::vector<ParamInfo> params;
  annotation::Annotation ann;
  std::shared_ptr<Nothing> exe = std::make_shared<Nothing>();

  Fixture(int d, std::vector<ParamInfo> p, const std::string& text)
      : devices(d),
        planner(d, nullptr),
        params(std::move(p)),
        ann(annotation::Annotation::parse(text, params, {})) {}

  uint64_t arrays = 0;
  ArrayMeta array(const Dim& shape, const DataDistribution& dist, DType dtype = DType::f32) {
    ArrayMeta m;
    m.id = ++arrays;
    m.shape = shape;
    m.dtype = dtype;
    m.elem_size = dtype_size(dtype);
    for (auto& c : dist.chunks(shape, devices))
      m.chunks.push_back({0, c.region, c.owned, c.device});
    planner.assign_chunk_ids(m);
    planner.create_array(m, nullptr);
    return m;
  }
  Plan launch(const Dim& threads, const Dim& block, const WorkDistribution& work,
              std::vector<const ArrayMeta*> arrays) {
    LaunchSpec s;
    s.executable = exe;
    s.annotation = &ann;
    s.params = &params;
    s.threads = threads;
    s.block = block;
    s.superblocks = work.superblocks(threads, block, devices);
    s.arrays = std::move(arrays);
    s.int_scalars.assign(params.size(), 0);
    s.scalar_offsets = std::make_shared<std::vector<uint32_t>>(params.size(), 0);
    s.scalars = std::make_shared<std::vector<unsigned char>>();
    return planner.launch(s);
  }
};

int count(const Plan& p, const char* kind) {
  return static_cast<int>(std::count_if(p.tasks.begin(), p.tasks.end(), [&](const Task& t) {
    return std::string(t.kind()) == kind;
  }));
}

TEST(Planner, AlignedStencilUsesChunksInPlaceAndCopiesHalos) {
  Fixture f(2, {vec("out"), vec("in", true)}, "global i => write out[i], read in[i-1:i+1]");
  auto out = f.array({400}, dist::stencil({100}, {1}));
  auto in = f.array({400}, dist::stencil({100}, {1}));
  Plan p = f.launch({400}, {50}, work::tiles({100}), {&out, &in});
  EXPECT_EQ(count(p, "execute"), 4);
  EXPECT_EQ(count(p, "create"), 0);  // no temporaries
  // Each written tile lands in its own chunk; its neighbours' halos get a one-element copy.
  EXPECT_EQ(count(p, "copy"), 6);
  for (const Task& t : p.tasks)
    if (auto* c = std::get_if<Copy>(&t.payload)) EXPECT_EQ(c->region.volume(), 1);
  for (const Task& t : p.tasks)
    if (auto* e = std::get_if<Execute>(&t.payload)) {
      // Superblock k on device k % 2, reading the chunk on its own device.
      int k = static_cast<int>(e->blocks.lo[0] / 2);
      EXPECT_EQ(t.device, k % 2);
      EXPECT_EQ(e->arrays[1].chunk.id, in.chunks[k].id);
      EXPECT_EQ(e->arrays[1].region,
                Rect(1, {std::max(0, 100 * k - 1), 0, 0}, {std::min(400, 100 * k + 101), 1, 1}));
    }
  EXPECT_NE(p.to_dot().find("execute"), std::string::npos);
}

// A chunk with halo elements whose own elements a superblock overwrites in place: its
// staging need not bring those (the elements [fresh_lo, fresh_hi) of the chunk's box), and
// brings the halos, which only neighbours write. Through `write` it brings all.
TEST(Planner, AChunksOwnPartOverwrittenInPlaceIsNotBroughtBack) {
  for (const char* mode : {"overwrite", "write"}) {
    SCOPED_TRACE(mode);
    Fixture f(2, {vec("out"), vec("in", true)},
              fmt::format("global i => {} out[i], read in[i-1:i+1]", mode));
    auto out = f.array({400}, dist::stencil({100}, {1}));
    auto in = f.array({400}, dist::stencil({100}, {1}));
    Plan p = f.launch({400}, {25}, work::tiles({100}), {&out, &in});
    EXPECT_EQ(count(p, "create"), 0);  // in place
    std::vector<ChunkAccess> uses;
    int executes = 0;
    for (const Task& t : p.tasks) {
      auto* e = std::get_if<Execute>(&t.payload);
      if (!e) continue;
      ++executes;
      t.chunk_uses(uses);
      ASSERT_EQ(uses.size(), 2u);
      const ChunkAccess& o = uses[0];
      EXPECT_TRUE(o.write && !o.discard);
      EXPECT_EQ(uses[1].fresh_hi - uses[1].fresh_lo, 0);  // in: read
      const int64_t k = e->blocks.lo[0] / 4;              // superblock k: 4 blocks of 25
      const Rect& box = e->arrays[0].chunk.rect;
      EXPECT_EQ(box, out.chunks[k].region);
      if (std::string(mode) == "write") {
        EXPECT_EQ(o.fresh_hi - o.fresh_lo, 0);
        continue;
      }
      EXPECT_EQ(o.volume, box.volume());
      EXPECT_EQ(o.fresh_lo, 100 * k - box.lo[0]);
      EXPECT_EQ(o.fresh_hi, 100 * k + 100 - box.lo[0]);
    }
    EXPECT_EQ(executes, 4);
  }
}

TEST(Planner, MisalignedSuperblocksAssembleAndScatterTemporaries) {
  Fixture f(2, {vec("out"), vec("in", true)}, "global i => write out[i], read in[i]");
  auto out = f.array({300}, dist::rows(100));
  auto in = f.array({300}, dist::rows(100));
  Plan p = f.launch({300}, {30}, work::tiles({150}), {&out, &in});
  EXPECT_EQ(count(p, "execute"), 2);
  // Each superblock spans two chunks of each array: two temporaries per superblock.
  EXPECT_EQ(count(p, "create"), 4);
  EXPECT_EQ(count(p, "delete"), 4);
  // in: 2 pieces per superblock; out: assembled (2) and scattered (2) per superblock.
  EXPECT_EQ(count(p, "copy"), 2 * 2 + 2 * 4);
}

// A task that writes its destination chunk's whole box discards the chunk's old contents
// (out of core they are not brought back); one that writes part of it, or also reads the
// chunk, does not. A Reduce fills its destination first.
TEST(Task, AChunkWrittenWholeIsDiscarded) {
  const Rect whole(1, {0, 0, 0}, {100, 1, 1}), part(1, {10, 0, 0}, {60, 1, 1});
  const ChunkRef a{1, whole}, b{2, whole};
  auto uses_of = [](Payload p) {
    Task t;
    t.payload = std::move(p);
    std::vector<ChunkAccess> uses;
    t.chunk_uses(uses);
    return uses;
  };
  auto discards = [&](Payload p, ChunkId c) {
    for (const ChunkAccess& u : uses_of(std::move(p)))
      if (u.chunk == c) return u.write && u.discard;
    ADD_FAILURE() << "chunk " << c << " not used";
    return false;
  };
  std::array<unsigned char, 16> value{};
  auto bytes = std::make_shared<std::vector<unsigned char>>(400, 1);
  EXPECT_TRUE(discards(Fill{a, whole, 4, value}, 1));
  EXPECT_FALSE(discards(Fill{a, part, 4, value}, 1));
  EXPECT_TRUE(discards(HostWrite{a, whole, bytes, whole, 4}, 1));
  EXPECT_FALSE(discards(HostWrite{a, part, bytes, whole, 4}, 1));
  EXPECT_TRUE(discards(Recv{a, whole, 4, 1, 7}, 1));
  EXPECT_FALSE(discards(Recv{a, part, 4, 1, 7}, 1));
  EXPECT_TRUE(discards(Copy{b, a, whole, 4}, 1));
  EXPECT_FALSE(discards(Copy{b, a, part, 4}, 1));
  EXPECT_FALSE(uses_of(Copy{b, a, whole, 4})[0].discard);            // the source: read
  EXPECT_FALSE(discards(Copy{ChunkRef{1, whole}, a, whole, 4}, 1));  // reads it too
  EXPECT_TRUE(discards(Reduce{a, {b}, annotation::ReduceOp::add, DType::f32}, 1));
  EXPECT_TRUE(discards(Narrow{b, a, whole, DType::f16}, 1));
  EXPECT_FALSE(discards(Narrow{b, a, part, DType::f16}, 1));
  EXPECT_FALSE(uses_of(Narrow{b, a, whole, DType::bf16})[0].write);  // the source: read
}

// The same through `overwrite`: the written temporaries are not assembled (the kernel
// writes them whole), and their executes wait for nothing earlier on `out`; the scatter
// does. A chunk the kernel overwrites whole in place is marked for staging without its old
// contents.
TEST(Planner, OverwrittenTemporariesAreNotAssembled) {
  Fixture f(2, {vec("out"), vec("in", true)}, "global i => overwrite out[i], read in[i]");
  auto out = f.array({300}, dist::rows(100));
  auto in = f.array({300}, dist::rows(100));
  Plan first = f.launch({300}, {50}, work::tiles({100}), {&out, &in});  // in place
  Plan p = f.launch({300}, {30}, work::tiles({150}), {&out, &in});
  EXPECT_EQ(count(p, "execute"), 2);
  EXPECT_EQ(count(p, "create"), 4);
  // in: 2 pieces per superblock; out: only scattered (2) per superblock.
  EXPECT_EQ(count(p, "copy"), 2 * 2 + 2 * 2);
  std::vector<ChunkAccess> uses;
  for (const Task& t : first.tasks)
    if (std::holds_alternative<Execute>(t.payload)) {
      t.chunk_uses(uses);
      ASSERT_EQ(uses.size(), 2u);
      EXPECT_TRUE(uses[0].write && uses[0].discard);    // out's chunk, written whole
      EXPECT_TRUE(!uses[1].write && !uses[1].discard);  // in's chunk, read
    }
  for (const Task& t : p.tasks) {
    if (std::holds_alternative<Execute>(t.payload)) {
      // It waits for the temporaries' creation and for in's pieces, not for the first
      // launch's executes (which wrote out).
      for (TaskId d : t.deps) {
        auto dep =
            std::find_if(p.tasks.begin(), p.tasks.end(), [&](const Task& x) { return x.id == d; });
        ASSERT_NE(dep, p.tasks.end()) << "execute " << t.id << " waits for " << d;
        EXPECT_TRUE(std::holds_alternative<CreateChunk>(dep->payload) ||
                    std::holds_alternative<Copy>(dep->payload));
      }
    }
  }
}

// Superblocks of one device that read the same region of an array the launch leaves alone
// share one temporary (GEMM's B); once the launch writes the array, each gets its own.
TEST(Planner, SuperblocksOfADeviceShareAReadOnlyTemporary) {
  Fixture f(2, {vec("out"), vec("in", true)}, "global i => write out[i], read in[:]");
  auto out = f.array({400}, dist::rows(100));
  auto in = f.array({400}, dist::rows(100));
  Plan p = f.launch({400}, {50}, work::tiles({100}), {&out, &in});
  EXPECT_EQ(count(p, "execute"), 4);
  EXPECT_EQ(count(p, "create"), 2);  // one whole `in` per device
  EXPECT_EQ(count(p, "delete"), 2);
  EXPECT_EQ(count(p, "copy"), 2 * 4);
  std::map<int, ChunkId> temp_of_device;
  std::map<ChunkId, std::vector<TaskId>> readers;
  for (const Task& t : p.tasks)
    if (auto* e = std::get_if<Execute>(&t.payload)) {
      auto [it, first] = temp_of_device.emplace(t.device, e->arrays[1].chunk.id);
      EXPECT_EQ(it->second, e->arrays[1].chunk.id);
      readers[e->arrays[1].chunk.id].push_back(t.id);
    }
  // Each execute waits for the temporary's four copies; its deletion waits for both readers.
  for (const Task& t : p.tasks) {
    if (auto* e = std::get_if<Execute>(&t.payload)) {
      int copies = 0;
      for (const Task& c : p.tasks)
        if (auto* cp = std::get_if<Copy>(&c.payload); cp && cp->dst.id == e->arrays[1].chunk.id)
          copies += std::count(t.deps.begin(), t.deps.end(), c.id) > 0;
      EXPECT_EQ(copies, 4);
    }
    if (auto* d = std::get_if<DeleteChunk>(&t.payload))
      for (TaskId r : readers.at(d->chunk))
        EXPECT_EQ(std::count(t.deps.begin(), t.deps.end(), r), 1);
  }
  // The same reads of an array the launch also writes: a temporary per superblock.
  Fixture g(2, {vec("out"), vec("in", true)}, "global i => write out[i], read in[:]");
  auto both = g.array({400}, dist::rows(100));
  Plan q = g.launch({400}, {50}, work::tiles({100}), {&both, &both});
  EXPECT_EQ(count(q, "create"), 4);
}

// With a read cache, the shared temporaries stay for the next launch that reads the same
// region on the same device (no copies then), until the array is written: a host write
// drops them (deleted after their readers), and so does a launch that writes the array.
TEST(Planner, KeptReadOnlyCopiesServeLaterLaunchesUntilTheArrayIsWritten) {
  Fixture f(2, {vec("out"), vec("in", true)}, "global i => write out[i], read in[:]");
  f.planner.set_read_cache({1 << 20, 1 << 20});
  auto out = f.array({400}, dist::rows(100));
  auto in = f.array({400}, dist::rows(100));
  auto temps = [](const Plan& p) {
    std::map<int, ChunkId> of_device;
    for (const Task& t : p.tasks)
      if (auto* e = std::get_if<Execute>(&t.payload)) of_device[t.device] = e->arrays[1].chunk.id;
    return of_device;
  };
  Plan first = f.launch({400}, {50}, work::tiles({100}), {&out, &in});
  EXPECT_EQ(count(first, "copy"), 2 * 4);
  EXPECT_EQ(count(first, "delete"), 0);  // kept
  EXPECT_EQ(f.planner.cached_reads(), 2u);
  Plan second = f.launch({400}, {50}, work::tiles({100}), {&out, &in});
  EXPECT_EQ(count(second, "create"), 0);
  EXPECT_EQ(count(second, "copy"), 0);
  EXPECT_EQ(temps(second), temps(first));
  // Each of the second launch's executes still waits for the copies that filled its copy.
  for (const Task& t : second.tasks)
    if (std::holds_alternative<Execute>(t.payload)) {
      int copies = 0;
      for (const Task& c : first.tasks)
        if (auto* cp = std::get_if<Copy>(&c.payload); cp && cp->dst.id == temps(first)[t.device])
          copies += std::count(t.deps.begin(), t.deps.end(), c.id) > 0;
      EXPECT_EQ(copies, 4);
    }
  // A host write of `in`: the kept copies are deleted after every launch that read them.
  Plan write = f.planner.write_array(in, std::make_shared<std::vector<unsigned char>>(1600));
  EXPECT_EQ(count(write, "delete"), 2);
  EXPECT_EQ(f.planner.cached_reads(), 0u);
  for (const Task& t : write.tasks)
    if (auto* d = std::get_if<DeleteChunk>(&t.payload))
      for (const Plan* p : {&first, &second})
        for (const Task& e : p->tasks)
          if (auto* ex = std::get_if<Execute>(&e.payload); ex && ex->arrays[1].chunk.id == d->chunk)
            EXPECT_EQ(std::count(t.deps.begin(), t.deps.end(), e.id), 1);
  Plan third = f.launch({400}, {50}, work::tiles({100}), {&out, &in});
  EXPECT_EQ(count(third, "copy"), 2 * 4);  // assembled again
  // A launch that writes `in` drops them too; a limit too small keeps nothing.
  Fixture g(2, {vec("out"), vec("in", true)}, "global i => write out[i], read in[:]");
  g.planner.set_read_cache({1 << 20, 1 << 20});
  auto a = g.array({400}, dist::rows(100)), b = g.array({400}, dist::rows(100));
  g.launch({400}, {50}, work::tiles({100}), {&a, &b});
  EXPECT_EQ(g.planner.cached_reads(), 2u);
  Plan writes_b = g.launch({400}, {50}, work::tiles({100}), {&b, &a});
  EXPECT_EQ(count(writes_b, "delete"), 2);  // b's kept copies
  EXPECT_EQ(g.planner.cached_reads(), 2u);  // a's, read now, kept in their place
  Fixture h(2, {vec("out"), vec("in", true)}, "global i => write out[i], read in[:]");
  h.planner.set_read_cache({1000, 1000});  // less than `in` (1600 bytes)
  auto c = h.array({400}, dist::rows(100)), d = h.array({400}, dist::rows(100));
  Plan small = h.launch({400}, {50}, work::tiles({100}), {&c, &d});
  EXPECT_EQ(count(small, "delete"), 2);
  EXPECT_EQ(h.planner.cached_reads(), 0u);
}

TEST(Planner, DependenciesFollowRegionsAcrossLaunches) {
  Fixture f(1, {vec("out"), vec("in", true)}, "global i => write out[i], read in[i]");
  auto a = f.array({200}, dist::rows(200));
  auto b = f.array({200}, dist::rows(200));
  auto c = f.array({200}, dist::rows(200));
  // Launch 1 writes b's two halves in two superblocks: they do not depend on each other.
  Plan p1 = f.launch({200}, {10}, work::tiles({100}), {&b, &a});
  std::vector<TaskId> writers;
  for (auto& t : p1.tasks)
    if (std::holds_alternative<Execute>(t.payload)) writers.push_back(t.id);
  ASSERT_EQ(writers.size(), 2u);
  for (auto& t : p1.tasks)
    if (t.id == writers[1]) EXPECT_EQ(std::count(t.deps.begin(), t.deps.end(), writers[0]), 0);
  // Launch 2 reads b: each superblock depends on exactly the writer of its half.
  Plan p2 = f.launch({200}, {10}, work::tiles({100}), {&c, &b});
  int k = 0;
  for (auto& t : p2.tasks)
    if (std::holds_alternative<Execute>(t.payload)) {
      EXPECT_EQ(std::count(t.deps.begin(), t.deps.end(), writers[k]), 1);
      EXPECT_EQ(std::count(t.deps.begin(), t.deps.end(), writers[1 - k]), 0);
      ++k;
    }
  // Launch 3 writes a, which launch 1 read: write-after-read.
  Plan p3 = f.launch({200}, {10}, work::tiles({200}), {&a, &c});
  for (auto& t : p3.tasks)
    if (std::holds_alternative<Execute>(t.payload))
      for (TaskId w : writers) EXPECT_EQ(std::count(t.deps.begin(), t.deps.end(), w), 1);
}

TEST(Planner, ReductionsGoSuperblockThenDeviceThenAcrossDevices) {
  ParamInfo s = vec("s");
  s.rank = 0;
  Fixture f(2, {vec("in", true), s}, "global i => read in[i], reduce(+) s");
  auto in = f.array({800}, dist::rows(100));
  auto out = f.array({}, dist::centralized(1));
  Plan p = f.launch({800}, {100}, work::tiles({100}), {&in, &out});
  // 8 superblock partials, one per-device reduction on each of 2 devices, one across.
  EXPECT_EQ(count(p, "fill"), 8);
  EXPECT_EQ(count(p, "reduce"), 3);
  EXPECT_EQ(count(p, "copy"), 1);  // the result into the array's one chunk
}

TEST(Planner, ReductionTreesBoundTheInputsOfEveryReduceTask) {
  ParamInfo s = vec("s");
  s.rank = 0;
  Fixture f(1, {vec("in", true), s}, "global i => read in[i], reduce(+) s");
  auto in = f.array({100}, dist::rows(1));
  auto out = f.array({}, dist::centralized(0));
  Plan p = f.launch({100}, {1}, work::tiles({1}), {&in, &out});
  // 100 partials: 7 reductions of at most 16, then one of those 7.
  EXPECT_EQ(count(p, "reduce"), 8);
  for (const Task& t : p.tasks)
    if (auto* r = std::get_if<Reduce>(&t.payload)) EXPECT_LE(r->srcs.size(), 16u);
  // Every temporary created is deleted.
  EXPECT_EQ(count(p, "create"), count(p, "delete"));
}

std::string describe(const Plan& p);

// The partials of a float16 or bfloat16 sum or product are float32 (filled, reduced and
// moved as such) and one Narrow rounds the last of them into the array's dtype, which the
// copies into the array's chunks take; a min or max, and other dtypes, keep the array's.
TEST(Planner, SixteenBitSumsReduceFloat32PartialsRoundedOnce) {
  ParamInfo s = vec("s");
  s.rank = 0;
  struct Case {
    const char* rule;
    DType dtype, partial;
  };
  for (const Case& c :
       {Case{"reduce(+)", DType::f16, DType::f32}, Case{"reduce(*)", DType::bf16, DType::f32},
        Case{"atomic(+)", DType::bf16, DType::f32}, Case{"atomic(*)", DType::f16, DType::f32},
        Case{"reduce(max)", DType::f16, DType::f16}, Case{"atomic(min)", DType::bf16, DType::bf16},
        Case{"reduce(+)", DType::f32, DType::f32}, Case{"reduce(+)", DType::i16, DType::i16}}) {
    SCOPED_TRACE(fmt::format("{} of {}", c.rule, dtype_name(c.dtype)));
    Fixture f(2, {vec("in", true), s}, fmt::format("global i => read in[i], {} s", c.rule));
    auto in = f.array({800}, dist::rows(100));
    auto out = f.array({}, dist::replicated(), c.dtype);
    Plan p = f.launch({800}, {100}, work::tiles({100}), {&in, &out});
    const bool wide = c.partial != c.dtype;
    const annotation::ReduceOp op = f.ann.modes()[1].op;
    std::set<ChunkId> narrowed;
    for (const Task& t : p.tasks) {
      if (auto* fill = std::get_if<Fill>(&t.payload)) {
        EXPECT_EQ(fill->elem_size, dtype_size(c.partial));
        EXPECT_EQ(fill->value, reduce_identity(op, c.partial));
      } else if (auto* r = std::get_if<Reduce>(&t.payload)) {
        EXPECT_EQ(r->dtype, c.partial);
      } else if (auto* n = std::get_if<Narrow>(&t.payload)) {
        EXPECT_EQ(n->dtype, c.dtype);
        narrowed.insert(n->dst.id);
      } else if (auto* copy = std::get_if<Copy>(&t.payload)) {
        // Into each of the two replicas, from the rounded result.
        EXPECT_EQ(copy->elem_size, dtype_size(c.dtype));
        EXPECT_EQ(narrowed.count(copy->src.id), wide ? 1u : 0u);
      }
    }
    EXPECT_EQ(count(p, "narrow"), wide ? 1 : 0);
    EXPECT_EQ(count(p, "copy"), 2);
    EXPECT_EQ(count(p, "create"), count(p, "delete"));
    // A repeat comes from the memo (its temporaries renumbered), as planned afresh.
    Fixture fresh(2, f.params, fmt::format("global i => read in[i], {} s", c.rule));
    fresh.planner.set_memoize(false);
    auto in2 = fresh.array({800}, dist::rows(100));
    auto out2 = fresh.array({}, dist::replicated(), c.dtype);
    fresh.launch({800}, {100}, work::tiles({100}), {&in2, &out2});
    const Plan again = f.launch({800}, {100}, work::tiles({100}), {&in, &out});
    EXPECT_EQ(f.planner.memo_hits(), 1u);
    EXPECT_EQ(describe(again),
              describe(fresh.launch({800}, {100}, work::tiles({100}), {&in2, &out2})));
  }
}

TEST(Planner, ReplicatedWritesUpdateEveryReplica) {
  Fixture f(3, {vec("out"), vec("in", true)}, "global i => write out[i], read in[i]");
  auto out = f.array({90}, dist::replicated());
  auto in = f.array({90}, dist::rows(30));
  Plan p = f.launch({90}, {30}, work::tiles({30}), {&out, &in});
  // Each superblock writes its replica in place and copies its part to the other two.
  EXPECT_EQ(count(p, "copy"), 3 * 2);
  EXPECT_EQ(count(p, "create"), 0);
}

// Readers of a chunk pile up while their tasks run (a chain queued on a GPU): the records
// are pruned at doubling sizes, so asking after them costs a bounded number of questions
// per record however many still run; once they are done they go. Disjoint readers keep
// their records, a writer over all of them supersedes them.
// A plan as text, every task with what it does and its dependencies (sorted): two plans
// with the same text are the same plan.
std::string describe(const Plan& p) {
  std::string s = fmt::format("done {}\n", p.done);
  auto ref = [](const ChunkRef& c) { return fmt::format("{}{}", c.id, c.rect.str()); };
  for (const Task& t : p.tasks) {
    s += fmt::format("{} {} on {}:", t.kind(), t.id, t.device);
    std::visit(
        [&](const auto& x) {
          using X = std::decay_t<decltype(x)>;
          if constexpr (std::is_same_v<X, CreateChunk>)
            s += fmt::format(" {} {}", x.chunk, x.bytes);
          if constexpr (std::is_same_v<X, DeleteChunk>) s += fmt::format(" {}", x.chunk);
          if constexpr (std::is_same_v<X, Fill>) s += " " + ref(x.dst) + " " + x.region.str();
          if constexpr (std::is_same_v<X, Copy>)
            s += " " + ref(x.src) + " -> " + ref(x.dst) + " " + x.region.str();
          if constexpr (std::is_same_v<X, Reduce>) {
            s += " " + ref(x.dst) + " <-";
            for (auto& src : x.srcs) s += " " + ref(src);
          }
          if constexpr (std::is_same_v<X, Narrow>)
            s += fmt::format(" {} -> {} {}", ref(x.src), ref(x.dst), dtype_name(x.dtype));
          if constexpr (std::is_same_v<X, Execute>) {
            s += " blocks " + x.blocks.str();
            for (auto& a : x.arrays)
              s += fmt::format(" [{} {} {}]", ref(a.chunk), a.region.str(), int(a.mode));
          }
        },
        t.payload);
    std::vector<TaskId> deps = t.deps;
    std::sort(deps.begin(), deps.end());
    s += " after";
    for (TaskId d : deps) s += fmt::format(" {}", d);
    s += "\n";
  }
  return s;
}

// Random sequences of launches (halos across devices, superblocks that do not line up with
// the chunks and so assemble temporaries, reductions), host writes and read-backs, given to
// a planner that memoizes launches and to one that does not: every plan is the same.
TEST(Planner, MemoizedLaunchesPlanWhatPlanningAfreshWould) {
  auto g = gridspan::test::rng(71);
  const std::vector<ParamInfo> params{vec("out"), vec("in", true), vec("s")};
  const std::string text = "global i => write out[i], read in[i-1:i+1], reduce(+) s[0]";
  Fixture on(2, params, text), off(2, params, text);
  off.planner.set_memoize(false);
  std::vector<std::pair<ArrayMeta, ArrayMeta>> arrays;  // the same array in each
  const std::vector<DataDistribution> dists{dist::stencil({100}, {1}), dist::rows(70),
                                            dist::tiles({150})};
  for (int k = 0; k < 4; ++k)
    arrays.emplace_back(on.array({300}, dists[k % 3]), off.array({300}, dists[k % 3]));
  auto sum_on = on.array({1}, dist::rows(1)), sum_off = off.array({1}, dist::rows(1));
  const std::vector<WorkDistribution> works{work::tiles({100}), work::tiles({60}),
                                            work::tiles({300})};
  std::vector<float> host(300);
  for (int step = 0; step < 200; ++step) {
    const int op = int(g() % 8), x = int(g() % 4), y = (x + 1) % 4;  // 12 launches to repeat
    SCOPED_TRACE(fmt::format("step {} op {}", step, op));
    Plan a, b;
    if (op == 6) {
      auto data = std::make_shared<std::vector<unsigned char>>(1200);
      a = on.planner.write_array(arrays[x].first, data);
      b = off.planner.write_array(arrays[x].second, data);
    } else if (op == 7) {
      a = on.planner.read_array(arrays[x].first, host.data());
      b = off.planner.read_array(arrays[x].second, host.data());
    } else {
      const WorkDistribution& w = works[op % 3];
      a = on.launch({300}, {10}, w, {&arrays[x].first, &arrays[y].first, &sum_on});
      b = off.launch({300}, {10}, w, {&arrays[x].second, &arrays[y].second, &sum_off});
    }
    ASSERT_EQ(describe(a), describe(b));
  }
  EXPECT_GT(on.planner.memo_hits(), 100u);
  EXPECT_EQ(off.planner.memo_hits(), 0u);
}

// A launch repeated with other arrays, another work distribution, or arrays of other
// distributions is planned again; a repeat after a host write waits for that write.
TEST(Planner, ARepeatWithOtherArraysOrDistributionsIsPlannedAgain) {
  Fixture f(2, {vec("out"), vec("in", true)}, "global i => write out[i], read in[i-1:i+1]");
  auto a = f.array({400}, dist::stencil({100}, {1}));
  auto b = f.array({400}, dist::stencil({100}, {1}));
  auto c = f.array({400}, dist::rows(150));  // b's shape, another distribution
  // What the kernels read `in` from: its chunks, and what is copied into temporaries.
  const ChunkId last_array_chunk = c.chunks.back().id;
  auto chunks_read = [&](const Plan& p) {
    std::set<ChunkId> ids;
    for (const Task& t : p.tasks) {
      if (auto* cp = std::get_if<Copy>(&t.payload); cp && cp->dst.id > last_array_chunk)
        ids.insert(cp->src.id);
      if (auto* e = std::get_if<Execute>(&t.payload)) ids.insert(e->arrays[1].chunk.id);
    }
    return ids;
  };
  Plan first = f.launch({400}, {10}, work::tiles({100}), {&a, &b});
  EXPECT_EQ(f.planner.memo_hits(), 0u);
  Plan again = f.launch({400}, {10}, work::tiles({100}), {&a, &b});
  EXPECT_EQ(f.planner.memo_hits(), 1u);
  EXPECT_EQ(again.tasks.size(), first.tasks.size());
  Plan other = f.launch({400}, {10}, work::tiles({100}), {&a, &c});
  EXPECT_EQ(f.planner.memo_hits(), 1u);
  for (ChunkId id : chunks_read(other)) {
    bool of_c = false;
    for (auto& ch : c.chunks) of_c = of_c || ch.id == id;
    bool temporary = id > last_array_chunk;
    EXPECT_TRUE(of_c || temporary) << "chunk " << id;
  }
  f.launch({400}, {10}, work::tiles({50}), {&a, &b});
  EXPECT_EQ(f.planner.memo_hits(), 1u);
  // A new array of another distribution in b's place.
  ArrayMeta b2 = f.array({400}, dist::tiles({80}));
  f.launch({400}, {10}, work::tiles({100}), {&a, &b2});
  EXPECT_EQ(f.planner.memo_hits(), 1u);
  Plan write = f.planner.write_array(b, std::make_shared<std::vector<unsigned char>>(1600));
  std::set<TaskId> writes;
  for (const Task& t : write.tasks) writes.insert(t.id);
  Plan after = f.launch({400}, {10}, work::tiles({100}), {&a, &b});
  EXPECT_EQ(f.planner.memo_hits(), 2u);
  int waits = 0;
  for (const Task& t : after.tasks)
    for (TaskId d : t.deps) waits += writes.count(d);
  EXPECT_GE(waits, 4);  // every superblock reads b's new values
}

TEST(RegionRecords, FinishedTasksArePrunedAtDoublingSizes) {
  plan::TaskId done_below = 0;
  std::size_t asked = 0;
  plan::RegionRecords records([&](plan::TaskId t) {
    ++asked;
    return t < done_below;
  });
  const Rect all(1, {0, 0, 0}, {100, 1, 1});
  const int n = 5000;
  for (int t = 1; t <= n; ++t) records.record(1, all, t, false);
  EXPECT_EQ(records.size(), std::size_t(n));  // none is done: all are kept
  EXPECT_LT(asked, std::size_t(2 * n));
  std::vector<plan::TaskId> deps;
  records.write_deps(1, all, deps);
  EXPECT_EQ(deps.size(), std::size_t(n));  // a writer waits for every reader
  done_below = n + 1;
  for (int t = n + 1; t <= 2 * n; ++t) records.record(1, all, t, false);
  // The first n went at the next pruning; the second n still run.
  EXPECT_EQ(records.size(), std::size_t(n));
  deps.clear();
  records.write_deps(1, all, deps);
  EXPECT_EQ(*std::min_element(deps.begin(), deps.end()), plan::TaskId(n + 1));
  EXPECT_LT(asked, std::size_t(5 * n));
  records.record(1, all, 2 * n + 1, true);
  EXPECT_EQ(records.size(), 1u);  // the writer covers them all
  deps.clear();
  records.read_deps(1, all, deps);
  EXPECT_EQ(deps, std::vector<plan::TaskId>{plan::TaskId(2 * n + 1)});
}

// With a done filter the records of a chunk are pruned by one call for all of its tasks
// (one lock of the worker, not one per task), at the same doubling sizes.
TEST(RegionRecords, ADoneFilterPrunesAChunkInOneCall) {
  plan::TaskId done_below = 0;
  std::size_t calls = 0, asked = 0;
  plan::RegionRecords records(nullptr);
  records.set_done_filter([&](std::vector<plan::TaskId>& tasks) {
    ++calls;
    asked += tasks.size();
    std::erase_if(tasks, [&](plan::TaskId t) { return t < done_below; });
  });
  const Rect all(1, {0, 0, 0}, {100, 1, 1});
  const int n = 5000;
  for (int t = 1; t <= n; ++t) records.record(1, all, t, false);
  EXPECT_EQ(records.size(), std::size_t(n));
  EXPECT_LT(calls, 12u);  // 32, 64, ... 4096
  EXPECT_LT(asked, std::size_t(2 * n));
  done_below = n + 1;
  for (int t = n + 1; t <= 2 * n; ++t) records.record(1, all, t, false);
  EXPECT_EQ(records.size(), std::size_t(n));
  std::vector<plan::TaskId> deps;
  records.write_deps(1, all, deps);
  EXPECT_EQ(*std::min_element(deps.begin(), deps.end()), plan::TaskId(n + 1));
  EXPECT_LT(calls, 24u);
}

}  // namespace
}  // namespace gridspan::plan
