// RAII for the driver's handles: a Stream, an Event and a Module own what they wrap and
// free it when they go. The context that made one must be current when it goes: the
// device's destructor binds it before it lets its handles go, and a kernel binds each
// device before its module there goes.
#pragma once

#include <string>
#include <utility>

#include <fmt/format.h>

#include "backend/cuda/loader.hpp"
#include "gridspan/core/error.hpp"

namespace gridspan::backend::cuda {

// A handle made by Traits::create(api, args...) and freed by Traits::destroy.
template <class Handle, class Traits>
class Owned {
 public:
  Owned() = default;
  template <class... A>
  explicit Owned(const DriverApi& api, const A&... args)
      : api_(&api), h_(Traits::create(api, args...)) {}
  ~Owned() { reset(); }
  Owned(Owned&& o) noexcept : api_(o.api_), h_(std::exchange(o.h_, nullptr)) {}
  Owned& operator=(Owned&& o) noexcept {
    if (this != &o) {
      reset();
      api_ = o.api_;
      h_ = std::exchange(o.h_, nullptr);
    }
    return *this;
  }
  Owned(const Owned&) = delete;
  Owned& operator=(const Owned&) = delete;

  Handle get() const { return h_; }
  operator Handle() const { return h_; }  // NOLINT(google-explicit-constructor): a handle
  explicit operator bool() const { return h_ != nullptr; }
  void reset() {
    if (h_) Traits::destroy(*api_, h_);
    h_ = nullptr;
  }

 protected:
  const DriverApi* api_ = nullptr;

 private:
  Handle h_ = nullptr;
};

/// A stream that does not synchronise with the legacy default stream.
struct StreamTraits {
  static CUstream create(const DriverApi& api, const std::string& where) {
    CUstream s = nullptr;
    GRIDSPAN_CHECK_CU(api.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), where);
    return s;
  }
  static void destroy(const DriverApi& api, CUstream s) { api.cuStreamDestroy(s); }
};
using Stream = Owned<CUstream, StreamTraits>;

/// An event made with `Flags`.
template <unsigned Flags>
struct EventTraits {
  static CUevent create(const DriverApi& api, const std::string& where) {
    CUevent e = nullptr;
    GRIDSPAN_CHECK_CU(api.cuEventCreate(&e, Flags), where);
    return e;
  }
  static void destroy(const DriverApi& api, CUevent e) { api.cuEventDestroy(e); }
};
/// An event without timing (the cheap kind: only what it waits for).
using Event = Owned<CUevent, EventTraits<CU_EVENT_DISABLE_TIMING>>;
/// An event that keeps time, for the works the cost model samples (Device::time_work).
using TimingEvent = Owned<CUevent, EventTraits<CU_EVENT_DEFAULT>>;

/// A module loaded from a cubin; `what` names it in errors ("kernel `stencil`").
struct ModuleTraits {
  static CUmodule create(const DriverApi& api, const std::string& cubin, const std::string& what,
                         const std::string& where) {
    CUmodule m = nullptr;
    CuCall call = GRIDSPAN_CU(api.cuModuleLoadData(&m, cubin.data()));
    if (!call.ok()) throw DeviceError(fmt::format("loading {}: {}", what, call.message(where)));
    return m;
  }
  static void destroy(const DriverApi& api, CUmodule m) { api.cuModuleUnload(m); }
};
class Module : public Owned<CUmodule, ModuleTraits> {
 public:
  Module() = default;
  Module(const DriverApi& api, const std::string& cubin, const std::string& what,
         const std::string& where)
      : Owned(api, cubin, what, where), what_(what) {}
  /// The entry point `name`; throws naming the module when it has none.
  CUfunction function(const char* name, const std::string& where) const {
    CUfunction f = nullptr;
    CuCall call = GRIDSPAN_CU(api_->cuModuleGetFunction(&f, get(), name));
    if (!call.ok())
      throw DeviceError(fmt::format("{} has no entry `{}`: {}", what_, name, call.message(where)));
    return f;
  }

 private:
  std::string what_;
};

}  // namespace gridspan::backend::cuda
