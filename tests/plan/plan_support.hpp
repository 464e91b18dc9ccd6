// What the planner's tests share: an executable that does nothing and 1-D parameters.
#pragma once

#include <string>

#include "plan/planner.hpp"

namespace gridspan::plan::test_support {

class Nothing : public Executable {
 public:
  const std::string& name() const override { return name_; }
  void run(const ExecFrame&) const override {}
  std::string name_ = "k";
};

inline ParamInfo vec(const char* name, bool is_const = false) {
  ParamInfo p;
  p.name = name;
  p.is_array = true;
  p.rank = 1;
  p.is_const = is_const;
  p.type_text = "Vector<float>";
  return p;
}

}  // namespace gridspan::plan::test_support
