// The byte format of tasks between processes (see wire.hpp).
#include "net/wire.hpp"

#include <cstring>
#include <type_traits>

#include <fmt/format.h>

#include "gridspan/core/error.hpp"

namespace gridspan::net {

using plan::Task;

namespace {

constexpr uint32_t kTasksMagic = 0x32575347;  // "GSW2" little-endian: format version 2
constexpr uint8_t kMaxRankByte = kMaxRank;

// The payload's index in plan::Payload, written before it; ReadBack never travels.
template <class T, std::size_t I = 0>
constexpr uint8_t payload_index() {
  if constexpr (std::is_same_v<std::variant_alternative_t<I, plan::Payload>, T>)
    return static_cast<uint8_t>(I);
  else
    return payload_index<T, I + 1>();
}

void write_chunk(Writer& w, const plan::ChunkRef& c) {
  w.u64(c.id);
  w.rect(c.rect);
}

plan::ChunkRef read_chunk(Reader& r, const char* field) {
  plan::ChunkRef c;
  c.id = r.u64(field);
  c.rect = r.rect(field);
  return c;
}

template <class E>
E read_enum(Reader& r, const char* field, E last) {
  uint8_t v = r.u8(field);
  if (v > static_cast<uint8_t>(last))
    r.fail(fmt::format("{} is {}, past the last value {}", field, v, static_cast<int>(last)));
  return static_cast<E>(v);
}

int read_rank(Reader& r, const char* field) {
  const uint32_t v = r.u32(field);
  if (v > (1u << 24)) r.fail(fmt::format("{} is {}", field, v));
  return static_cast<int>(v);
}

std::size_t read_elem_size(Reader& r, const char* field) {
  uint64_t e = r.u64(field);
  if (e == 0 || e > 16) r.fail(fmt::format("{} is {} bytes (1 to 16 expected)", field, e));
  return static_cast<std::size_t>(e);
}

// The fields Send and Recv share: a chunk and region, the element size, the other rank
// and the transfer.
struct Transfer {
  plan::ChunkRef chunk;
  Rect region;
  std::size_t elem_size;
  int rank;
  plan::TransferId transfer;
};

void write_transfer(Writer& w, const plan::ChunkRef& chunk, const Rect& region,
                    std::size_t elem_size, int rank, plan::TransferId transfer) {
  write_chunk(w, chunk);
  w.rect(region);
  w.u64(elem_size);
  w.u32(static_cast<uint32_t>(rank));
  w.u64(transfer);
}

Transfer read_transfer(Reader& r, const std::string& what) {
  Transfer t;
  t.chunk = read_chunk(r, (what + " chunk").c_str());
  t.region = r.rect((what + " region").c_str());
  t.elem_size = read_elem_size(r, (what + " element size").c_str());
  t.rank = read_rank(r, (what + " rank").c_str());
  t.transfer = r.u64((what + " transfer").c_str());
  return t;
}

void write_payload(Writer& w, const Task& t, const IdOfExecutable& id_of) {
  std::visit(
      [&](const auto& p) {
        using P = std::decay_t<decltype(p)>;
        w.u8(static_cast<uint8_t>(t.payload.index()));
        if constexpr (std::is_same_v<P, plan::CreateChunk>) {
          w.u64(p.chunk);
          w.u64(p.bytes);
        } else if constexpr (std::is_same_v<P, plan::DeleteChunk>) {
          w.u64(p.chunk);
        } else if constexpr (std::is_same_v<P, plan::Fill>) {
          write_chunk(w, p.dst);
          w.rect(p.region);
          w.u64(p.elem_size);
          w.bytes(p.value.data(), p.value.size());
        } else if constexpr (std::is_same_v<P, plan::Copy>) {
          write_chunk(w, p.src);
          write_chunk(w, p.dst);
          w.rect(p.region);
          w.u64(p.elem_size);
        } else if constexpr (std::is_same_v<P, plan::Reduce>) {
          write_chunk(w, p.dst);
          w.u32(static_cast<uint32_t>(p.srcs.size()));
          for (const auto& c : p.srcs) write_chunk(w, c);
          w.u8(static_cast<uint8_t>(p.op));
          w.u8(static_cast<uint8_t>(p.dtype));
        } else if constexpr (std::is_same_v<P, plan::Narrow>) {
          write_chunk(w, p.src);
          write_chunk(w, p.dst);
          w.rect(p.region);
          w.u8(static_cast<uint8_t>(p.dtype));
        } else if constexpr (std::is_same_v<P, plan::HostWrite>) {
          write_chunk(w, p.dst);
          w.rect(p.region);
          w.bytes(p.data.data(), p.data.size());
          w.rect(p.data_rect);
          w.u64(p.elem_size);
        } else if constexpr (std::is_same_v<P, plan::ReadBack>) {
          throw NetError(fmt::format(
              "internal error: task {} (a read-back into the driver's memory) cannot be sent "
              "to another process; the planner must read remote chunks through a send",
              t.id));
        } else if constexpr (std::is_same_v<P, plan::Execute>) {
          w.u64(id_of(p.executable));
          w.rect(p.blocks);
          w.dim(p.block);
          w.dim(p.grid);
          w.u32(static_cast<uint32_t>(p.arrays.size()));
          for (const plan::ExecArg& a : p.arrays) {
            write_chunk(w, a.chunk);
            w.rect(a.region);
            w.dim(a.shape);
            w.u8(static_cast<uint8_t>(a.mode));
            w.u8(static_cast<uint8_t>(a.op));
            w.u8(a.write ? 1 : 0);
          }
          static const std::vector<unsigned char> none;
          const auto& scalars = p.scalars ? *p.scalars : none;
          w.bytes(scalars.data(), scalars.size());
          static const std::vector<uint32_t> no_offsets;
          const auto& offsets = p.scalar_offsets ? *p.scalar_offsets : no_offsets;
          w.u32(static_cast<uint32_t>(offsets.size()));
          for (uint32_t o : offsets) w.u32(o);
        } else if constexpr (std::is_same_v<P, plan::Send>) {
          write_transfer(w, p.src, p.region, p.elem_size, p.to, p.transfer);
          w.u8(p.to_device ? 1 : 0);
        } else if constexpr (std::is_same_v<P, plan::Recv>) {
          write_transfer(w, p.dst, p.region, p.elem_size, p.from, p.transfer);
        } else if constexpr (std::is_same_v<P, plan::RecvHost>) {
          throw NetError(fmt::format(
              "internal error: task {} (a receive into the driver's memory) cannot be sent to "
              "another process",
              t.id));
        } else {
          static_assert(std::is_same_v<P, plan::Barrier>);
        }
      },
      t.payload);
}

plan::Payload read_payload(Reader& r, const ExecutableOfId& executable_of) {
  const uint8_t kind = r.u8("task kind");
  constexpr std::size_t kinds = std::variant_size_v<plan::Payload>;
  if (kind >= kinds) r.fail(fmt::format("task kind {} is unknown ({} kinds)", kind, kinds));
  if (kind == payload_index<plan::CreateChunk>()) {
    plan::CreateChunk c;
    c.chunk = r.u64("created chunk");
    c.bytes = r.u64("chunk bytes");
    return c;
  }
  if (kind == payload_index<plan::DeleteChunk>()) return plan::DeleteChunk{r.u64("deleted chunk")};
  if (kind == payload_index<plan::Fill>()) {
    plan::Fill f;
    f.dst = read_chunk(r, "fill target");
    f.region = r.rect("fill region");
    f.elem_size = read_elem_size(r, "fill element size");
    auto v = r.bytes("fill value", f.value.size());
    if (v.size() != f.value.size()) r.fail("fill value is not 16 bytes");
    std::memcpy(f.value.data(), v.data(), v.size());
    return f;
  }
  if (kind == payload_index<plan::Copy>()) {
    plan::Copy c;
    c.src = read_chunk(r, "copy source");
    c.dst = read_chunk(r, "copy target");
    c.region = r.rect("copy region");
    c.elem_size = read_elem_size(r, "copy element size");
    return c;
  }
  if (kind == payload_index<plan::Reduce>()) {
    plan::Reduce d;
    d.dst = read_chunk(r, "reduction target");
    const std::size_t n = r.count("reduction sources", 57);  // a chunk: id and box
    d.srcs.reserve(n);
    for (std::size_t i = 0; i < n; ++i) d.srcs.push_back(read_chunk(r, "reduction source"));
    d.op = read_enum(r, "reduction operator", annotation::ReduceOp::bit_or);
    d.dtype = read_enum(r, "reduction dtype", DType::boolean);
    return d;
  }
  if (kind == payload_index<plan::Narrow>()) {
    plan::Narrow n;
    n.src = read_chunk(r, "narrowing source");
    n.dst = read_chunk(r, "narrowing target");
    n.region = r.rect("narrowing region");
    n.dtype = read_enum(r, "narrowing dtype", DType::boolean);
    return n;
  }
  if (kind == payload_index<plan::HostWrite>()) {
    plan::HostWrite h;
    h.dst = read_chunk(r, "host write target");
    h.region = r.rect("host write region");
    h.data = std::make_shared<const std::vector<unsigned char>>(r.bytes("host write data"));
    h.data_rect = r.rect("host write data box");
    h.elem_size = read_elem_size(r, "host write element size");
    if (static_cast<std::size_t>(h.data_rect.volume()) * h.elem_size != h.data.size())
      r.fail(fmt::format("host write data is {} bytes for a box of {} elements of {} bytes",
                         h.data.size(), h.data_rect.volume(), h.elem_size));
    return h;
  }
  if (kind == payload_index<plan::Execute>()) {
    plan::Execute e;
    const ExecutableId id = r.u64("executable");
    e.executable = executable_of(id);
    if (!e.executable) r.fail(fmt::format("executable {} is not known to this process", id));
    e.blocks = r.rect("superblock");
    e.block = r.dim("block size");
    e.grid = r.dim("grid");
    // chunk, region, shape (of rank 0 at least), 3 bytes
    const std::size_t n = r.count("kernel arguments", 57 + 49 + 1 + 3);
    e.arrays.resize(n);
    for (plan::ExecArg& a : e.arrays) {
      a.chunk = read_chunk(r, "argument chunk");
      a.region = r.rect("argument region");
      a.shape = r.dim("argument shape");
      a.mode = read_enum(r, "argument mode", annotation::Mode::overwrite);
      a.op = read_enum(r, "argument operator", annotation::ReduceOp::bit_or);
      a.write = read_enum(r, "argument write flag", uint8_t(1)) != 0;
    }
    e.scalars = std::make_shared<const std::vector<unsigned char>>(r.bytes("scalar values"));
    const std::size_t k = r.count("scalar offsets", 4);
    auto offsets = std::make_shared<std::vector<uint32_t>>(k);
    for (uint32_t& o : *offsets) {
      o = r.u32("scalar offset");
      if (o > e.scalars->size())
        r.fail(
            fmt::format("scalar offset {} is past the {} bytes of scalars", o, e.scalars->size()));
    }
    e.scalar_offsets = std::move(offsets);
    return e;
  }
  if (kind == payload_index<plan::Barrier>()) return plan::Barrier{};
  if (kind == payload_index<plan::Send>()) {
    Transfer t = read_transfer(r, "send");
    const bool to_device = r.u8("send's receiver kind") != 0;
    return plan::Send{t.chunk, t.region, t.elem_size, t.rank, t.transfer, to_device};
  }
  if (kind == payload_index<plan::Recv>()) {
    Transfer t = read_transfer(r, "receive");
    return plan::Recv{t.chunk, t.region, t.elem_size, t.rank, t.transfer};
  }
  r.fail(
      fmt::format("task kind {} (a read-back into the driver's memory) cannot arrive from "
                  "another process",
                  kind));
}

}  // namespace

void Writer::u32(uint32_t v) {
  for (int i = 0; i < 4; ++i) out_.push_back(static_cast<unsigned char>(v >> (8 * i)));
}

void Writer::u64(uint64_t v) {
  for (int i = 0; i < 8; ++i) out_.push_back(static_cast<unsigned char>(v >> (8 * i)));
}

void Writer::bytes(const void* data, std::size_t n) {
  u64(n);
  const auto* p = static_cast<const unsigned char*>(data);
  out_.insert(out_.end(), p, p + n);
}

void Writer::dim(const Dim& d) {
  u8(static_cast<uint8_t>(d.rank()));
  for (int a = 0; a < d.rank(); ++a) i64(d[a]);
}

void Writer::rect(const Rect& r) {
  u8(static_cast<uint8_t>(r.rank));
  for (int a = 0; a < kMaxRank; ++a) {
    i64(r.lo[a]);
    i64(r.hi[a]);
  }
}

void Reader::fail(const std::string& why) const {
  throw NetError(fmt::format("malformed {}: {}", what_, why));
}

const unsigned char* Reader::take(std::size_t n, const char* field) {
  if (n > left_)
    fail(fmt::format("{} needs {} more bytes, {} are left (message cut short?)", field, n, left_));
  const unsigned char* p = p_;
  p_ += n;
  left_ -= n;
  return p;
}

uint8_t Reader::u8(const char* field) {
  return *take(1, field);
}

uint32_t Reader::u32(const char* field) {
  const unsigned char* p = take(4, field);
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= uint32_t(p[i]) << (8 * i);
  return v;
}

uint64_t Reader::u64(const char* field) {
  const unsigned char* p = take(8, field);
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t(p[i]) << (8 * i);
  return v;
}

std::vector<unsigned char> Reader::bytes(const char* field, std::size_t max) {
  const uint64_t n = u64(field);
  if (n > max) fail(fmt::format("{} is {} bytes, more than {}", field, n, max));
  const unsigned char* p = take(static_cast<std::size_t>(n), field);
  return std::vector<unsigned char>(p, p + n);
}

std::string Reader::str(const char* field, std::size_t max) {
  auto b = bytes(field, max);
  return std::string(b.begin(), b.end());
}

std::size_t Reader::count(const char* field, std::size_t item_bytes) {
  const uint32_t n = u32(field);
  if (item_bytes && n > left_ / item_bytes)
    fail(fmt::format("{} says {} items, more than the {} bytes left can hold", field, n, left_));
  return n;
}

Dim Reader::dim(const char* field) {
  const uint8_t rank = u8(field);
  if (rank > kMaxRankByte) fail(fmt::format("{} has rank {} (at most {})", field, rank, kMaxRank));
  Dim d = Dim::of_rank(rank, 0);
  for (int a = 0; a < rank; ++a) d[a] = i64(field);
  return d;
}

Rect Reader::rect(const char* field) {
  const uint8_t rank = u8(field);
  if (rank > kMaxRankByte) fail(fmt::format("{} has rank {} (at most {})", field, rank, kMaxRank));
  Rect r;
  r.rank = rank;
  for (int a = 0; a < kMaxRank; ++a) {
    r.lo[a] = i64(field);
    r.hi[a] = i64(field);
  }
  return r;
}

void Reader::finish() {
  if (left_ != 0) fail(fmt::format("{} bytes are left over after the last field", left_));
}

std::vector<unsigned char> encode_tasks(const std::vector<Task>& tasks,
                                        const IdOfExecutable& id_of) {
  Writer w;
  w.u32(kTasksMagic);
  w.u32(static_cast<uint32_t>(tasks.size()));
  for (const Task& t : tasks) {
    w.u64(t.id);
    w.u32(static_cast<uint32_t>(t.device));
    w.u32(static_cast<uint32_t>(t.deps.size()));
    for (plan::TaskId d : t.deps) w.u64(d);
    write_payload(w, t, id_of);
  }
  return std::move(w.buffer());
}

std::vector<Task> decode_tasks(const void* data, std::size_t size,
                               const ExecutableOfId& executable_of) {
  Reader r(data, size, "task message");
  const uint32_t magic = r.u32("message header");
  if (magic != kTasksMagic)
    r.fail(fmt::format("header is {:#010x}, not {:#010x} (another gridspan version?)", magic,
                       kTasksMagic));
  const std::size_t n = r.count("task count", 8 + 4 + 4 + 1);
  std::vector<Task> tasks(n);
  for (Task& t : tasks) {
    t.id = r.u64("task id");
    t.device = static_cast<int>(r.u32("task device"));
    if (t.device < 0) r.fail(fmt::format("task {} has device {}", t.id, t.device));
    const std::size_t deps = r.count("task dependencies", 8);
    t.deps.resize(deps);
    for (plan::TaskId& d : t.deps) d = r.u64("task dependency");
    t.payload = read_payload(r, executable_of);
  }
  r.finish();
  return tasks;
}

void write_error(Writer& w, const std::exception_ptr& error) {
  ErrorInfo info = describe_error(error);
  w.u8(info.kind);
  w.str(info.message);
}

std::exception_ptr read_error(Reader& r) {
  const uint8_t kind = r.u8("error kind");
  return make_error(kind, r.str("error message"));
}

}  // namespace gridspan::net
