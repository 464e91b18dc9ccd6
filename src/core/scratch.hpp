// A container borrowed from the calling thread's spares and given back empty, its memory
// kept: once warm, a hot path that needs a work list or a buffer per call allocates
// nothing, and a call nested in another on the same thread borrows one of its own.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

namespace gridspan {

template <class T>
class Scratch {
 public:
  Scratch() {
    auto& spares = spare_list();
    if (spares.empty()) {
      item_ = std::make_unique<T>();
    } else {
      item_ = std::move(spares.back());
      spares.pop_back();
    }
  }
  ~Scratch() {
    item_->clear();
    auto& spares = spare_list();
    if constexpr (requires { item_->capacity(); })
      if (item_->capacity() > kLargest) return;  // a rare large one is not kept
    if (spares.size() < kKept) spares.push_back(std::move(item_));
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;

  T& operator*() const { return *item_; }
  T* operator->() const { return item_.get(); }

 private:
  static constexpr std::size_t kKept = 8, kLargest = 4096;
  static std::vector<std::unique_ptr<T>>& spare_list() {
    thread_local std::vector<std::unique_ptr<T>> spares;
    return spares;
  }
  std::unique_ptr<T> item_;
};

}  // namespace gridspan
