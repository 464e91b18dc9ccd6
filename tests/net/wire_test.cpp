// The wire format of tasks: random tasks of every kind survive encode → decode field by
// field; every truncation, a wrong header, bad enums and lengths, unknown executables and
// read-backs are NetErrors, never a crash or a wrong task.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "gridspan/core/error.hpp"
#include "net/wire.hpp"
#include "support/random.hpp"

namespace gridspan::net {
namespace {

using plan::Task;

class Named : public plan::Executable {
 public:
  explicit Named(std::string n) : name_(std::move(n)) {}
  const std::string& name() const override { return name_; }
  void run(const plan::ExecFrame&) const override {}

 private:
  std::string name_;
};

struct Kernels {
  Named a{"a"}, b{"b"};
  IdOfExecutable id_of() const {
    return [this](const plan::Executable* e) -> ExecutableId { return e == &a ? 7 : 9; };
  }
  ExecutableOfId of_id() const {
    return [this](ExecutableId id) -> const plan::Executable* {
      return id == 7 ? &a : id == 9 ? &b : nullptr;
    };
  }
};

Rect random_rect(std::mt19937_64& g) {
  Rect r;
  r.rank = int(g() % 4);
  for (int a = 0; a < kMaxRank; ++a) {
    r.lo[a] = int64_t(g() % 1000) - 10;
    r.hi[a] = r.lo[a] + int64_t(g() % 5000);
  }
  return r;
}

plan::ChunkRef random_chunk(std::mt19937_64& g) {
  return plan::ChunkRef{g(), random_rect(g)};
}

Dim random_dim(std::mt19937_64& g) {
  Dim d = Dim::of_rank(int(g() % 4), 0);
  for (int a = 0; a < d.rank(); ++a) d[a] = int64_t(g() % 100000);
  return d;
}

// A task of payload kind `kind` (every kind but ReadBack) with random contents.
Task random_task(std::mt19937_64& g, std::size_t kind, const Kernels& k) {
  Task t;
  t.id = g();
  t.device = int(g() % 8);
  for (int i = int(g() % 5); i > 0; --i) t.deps.push_back(g());
  switch (kind) {
    case 0:
      t.payload = plan::CreateChunk{g(), std::size_t(g() % (1ull << 40))};
      break;
    case 1:
      t.payload = plan::DeleteChunk{g()};
      break;
    case 2: {
      plan::Fill f{random_chunk(g), random_rect(g), 1 + g() % 16, {}};
      for (auto& b : f.value) b = static_cast<unsigned char>(g());
      t.payload = f;
      break;
    }
    case 3:
      t.payload = plan::Copy{random_chunk(g), random_chunk(g), random_rect(g), 1 + g() % 16};
      break;
    case 4: {
      plan::Reduce r{random_chunk(g), {}, annotation::ReduceOp(g() % 6), DType(g() % 13)};
      for (int i = int(g() % 20); i > 0; --i) r.srcs.push_back(random_chunk(g));
      t.payload = r;
      break;
    }
    case 5: {
      Rect box(2, {3, 4, 0}, {3 + int64_t(g() % 9), 4 + int64_t(g() % 9), 1});
      std::size_t elem = 1 + g() % 8;
      auto data = test::random_vector<unsigned char>(std::size_t(box.volume()) * elem, g);
      t.payload =
          plan::HostWrite{random_chunk(g), random_rect(g),
                          std::make_shared<const std::vector<unsigned char>>(data), box, elem};
      break;
    }
    case 7: {
      plan::Execute e;
      e.executable = g() % 2 ? &k.a : &k.b;
      e.blocks = random_rect(g);
      e.block = random_dim(g);
      e.grid = random_dim(g);
      e.arrays.resize(g() % 6);
      for (auto& a : e.arrays) {
        a.chunk = random_chunk(g);
        a.region = random_rect(g);
        a.mode = annotation::Mode(g() % 5);
        a.op = annotation::ReduceOp(g() % 6);
        a.write = g() % 2;
      }
      auto scalars = test::random_vector<unsigned char>(g() % 64, g);
      auto offsets = std::make_shared<std::vector<uint32_t>>(e.arrays.size());
      for (auto& o : *offsets) o = uint32_t(g() % (scalars.size() + 1));
      e.scalars = std::make_shared<const std::vector<unsigned char>>(scalars);
      e.scalar_offsets = offsets;
      t.payload = e;
      break;
    }
    case 12:
      t.payload = plan::Narrow{random_chunk(g), random_chunk(g), random_rect(g),
                               g() % 2 ? DType::f16 : DType::bf16};
      break;
    case 9:
      t.payload = plan::Send{random_chunk(g), random_rect(g), 1 + g() % 16, int(g() % 64), g(),
                             g() % 2 == 0};
      break;
    case 10:
      t.payload = plan::Recv{random_chunk(g), random_rect(g), 1 + g() % 16, int(g() % 64), g()};
      break;
    default:
      t.payload = plan::Barrier{};
  }
  return t;
}

void expect_same(const plan::ChunkRef& a, const plan::ChunkRef& b) {
  EXPECT_EQ(a.id, b.id);
  EXPECT_EQ(a.rect, b.rect);
}

void expect_same(const Task& a, const Task& b) {
  EXPECT_EQ(a.id, b.id);
  EXPECT_EQ(a.device, b.device);
  EXPECT_EQ(a.deps, b.deps);
  ASSERT_EQ(a.payload.index(), b.payload.index());
  std::visit(
      [&](const auto& p) {
        using P = std::decay_t<decltype(p)>;
        const P& q = std::get<P>(b.payload);
        if constexpr (std::is_same_v<P, plan::CreateChunk>) {
          EXPECT_EQ(p.chunk, q.chunk);
          EXPECT_EQ(p.bytes, q.bytes);
        } else if constexpr (std::is_same_v<P, plan::DeleteChunk>) {
          EXPECT_EQ(p.chunk, q.chunk);
        } else if constexpr (std::is_same_v<P, plan::Fill>) {
          expect_same(p.dst, q.dst);
          EXPECT_EQ(p.region, q.region);
          EXPECT_EQ(p.elem_size, q.elem_size);
          EXPECT_EQ(p.value, q.value);
        } else if constexpr (std::is_same_v<P, plan::Copy>) {
          expect_same(p.src, q.src);
          expect_same(p.dst, q.dst);
          EXPECT_EQ(p.region, q.region);
          EXPECT_EQ(p.elem_size, q.elem_size);
        } else if constexpr (std::is_same_v<P, plan::Reduce>) {
          expect_same(p.dst, q.dst);
          ASSERT_EQ(p.srcs.size(), q.srcs.size());
          for (std::size_t i = 0; i < p.srcs.size(); ++i) expect_same(p.srcs[i], q.srcs[i]);
          EXPECT_EQ(p.op, q.op);
          EXPECT_EQ(p.dtype, q.dtype);
        } else if constexpr (std::is_same_v<P, plan::Narrow>) {
          expect_same(p.src, q.src);
          expect_same(p.dst, q.dst);
          EXPECT_EQ(p.region, q.region);
          EXPECT_EQ(p.dtype, q.dtype);
        } else if constexpr (std::is_same_v<P, plan::HostWrite>) {
          expect_same(p.dst, q.dst);
          EXPECT_EQ(p.region, q.region);
          EXPECT_TRUE(p.data == q.data);
          EXPECT_EQ(p.data_rect, q.data_rect);
          EXPECT_EQ(p.elem_size, q.elem_size);
        } else if constexpr (std::is_same_v<P, plan::Send>) {
          expect_same(p.src, q.src);
          EXPECT_EQ(p.region, q.region);
          EXPECT_EQ(p.elem_size, q.elem_size);
          EXPECT_EQ(p.to, q.to);
          EXPECT_EQ(p.to_device, q.to_device);
          EXPECT_EQ(p.transfer, q.transfer);
        } else if constexpr (std::is_same_v<P, plan::Recv>) {
          expect_same(p.dst, q.dst);
          EXPECT_EQ(p.region, q.region);
          EXPECT_EQ(p.elem_size, q.elem_size);
          EXPECT_EQ(p.from, q.from);
          EXPECT_EQ(p.transfer, q.transfer);
        } else if constexpr (std::is_same_v<P, plan::Execute>) {
          EXPECT_EQ(p.executable, q.executable);
          EXPECT_EQ(p.blocks, q.blocks);
          EXPECT_EQ(p.block, q.block);
          EXPECT_EQ(p.grid, q.grid);
          ASSERT_EQ(p.arrays.size(), q.arrays.size());
          for (std::size_t i = 0; i < p.arrays.size(); ++i) {
            expect_same(p.arrays[i].chunk, q.arrays[i].chunk);
            EXPECT_EQ(p.arrays[i].region, q.arrays[i].region);
            EXPECT_EQ(p.arrays[i].mode, q.arrays[i].mode);
            EXPECT_EQ(p.arrays[i].op, q.arrays[i].op);
            EXPECT_EQ(p.arrays[i].write, q.arrays[i].write);
          }
          EXPECT_EQ(*p.scalars, *q.scalars);
          EXPECT_EQ(*p.scalar_offsets, *q.scalar_offsets);
        }
      },
      a.payload);
}

TEST(Wire, EveryTaskKindSurvivesARoundTrip) {
  auto g = test::rng(41);
  Kernels k;
  std::vector<Task> tasks;
  for (int i = 0; i < 400; ++i) {
    std::size_t kind = g() % std::variant_size_v<plan::Payload>;
    if (kind == 6 || kind == 11) continue;  // ReadBack, RecvHost: driver memory, never sent
    tasks.push_back(random_task(g, kind, k));
  }
  auto bytes = encode_tasks(tasks, k.id_of());
  auto back = decode_tasks(bytes.data(), bytes.size(), k.of_id());
  ASSERT_EQ(back.size(), tasks.size());
  for (std::size_t i = 0; i < tasks.size(); ++i) {
    SCOPED_TRACE(i);
    expect_same(tasks[i], back[i]);
  }
  EXPECT_TRUE(decode_tasks(encode_tasks({}, k.id_of()).data(), 8, k.of_id()).empty());
}

template <class F>
void expect_net_error(F&& f, const std::string& phrase) {
  try {
    f();
    ADD_FAILURE() << "no NetError; expected one saying '" << phrase << "'";
  } catch (const NetError& e) {
    EXPECT_NE(std::string(e.what()).find(phrase), std::string::npos) << e.what();
  }
}

TEST(Wire, MalformedMessagesAreNetErrors) {
  auto g = test::rng(42);
  Kernels k;
  std::vector<Task> tasks;
  for (std::size_t kind : {0, 1, 2, 3, 4, 5, 7, 8, 9, 10, 12})
    tasks.push_back(random_task(g, kind, k));
  const auto bytes = encode_tasks(tasks, k.id_of());
  // Cut short anywhere: an error, never a crash or a task made of garbage.
  for (std::size_t n = 0; n < bytes.size(); ++n)
    EXPECT_THROW(decode_tasks(bytes.data(), n, k.of_id()), NetError) << n;
  auto extra = bytes;
  extra.push_back(0);
  expect_net_error([&] { decode_tasks(extra.data(), extra.size(), k.of_id()); }, "left over");
  auto header = bytes;
  header[0] ^= 0xFF;
  expect_net_error([&] { decode_tasks(header.data(), header.size(), k.of_id()); },
                   "another gridspan version");
  // A task kind past the last.
  Task plain;
  plain.id = 5;
  plain.payload = plan::DeleteChunk{3};
  auto kind = encode_tasks({plain}, k.id_of());
  kind[8 + 8 + 4 + 4] = 200;  // header, count, id, device, no deps: then the kind
  expect_net_error([&] { decode_tasks(kind.data(), kind.size(), k.of_id()); }, "kind 200");
  // A dependency count larger than the message.
  auto deps = encode_tasks({plain}, k.id_of());
  deps[8 + 8 + 4] = 0xFF;
  deps[8 + 8 + 4 + 1] = 0xFF;
  expect_net_error([&] { decode_tasks(deps.data(), deps.size(), k.of_id()); }, "task dependencies");
  // An enum out of range: a reduction with dtype 99.
  Task red;
  red.payload = plan::Reduce{random_chunk(g), {}, annotation::ReduceOp::add, DType::f32};
  auto r = encode_tasks({red}, k.id_of());
  r.back() = 99;
  expect_net_error([&] { decode_tasks(r.data(), r.size(), k.of_id()); }, "reduction dtype");
  // An executable this process does not have.
  Task ex = random_task(g, 7, k);
  auto e = encode_tasks({ex}, [](const plan::Executable*) { return ExecutableId(12345); });
  expect_net_error([&] { decode_tasks(e.data(), e.size(), k.of_id()); },
                   "executable 12345 is not known");
  // Read-backs point into the driver's memory: they are never encoded.
  Task rb;
  rb.id = 77;
  rb.payload = plan::ReadBack{random_chunk(g), random_rect(g), nullptr, random_rect(g), 4};
  expect_net_error([&] { encode_tasks({rb}, k.id_of()); }, "task 77");
  Task rh;
  rh.id = 78;
  rh.payload = plan::RecvHost{nullptr, random_rect(g), random_rect(g), 4, 1, 2};
  expect_net_error([&] { encode_tasks({rh}, k.id_of()); }, "task 78");
}

}  // namespace
}  // namespace gridspan::net
