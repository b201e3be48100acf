#include "common/error.hpp"

#include <cmath>

namespace xstage {

void require_positive(double x, const std::string& name) {
  if (!std::isfinite(x) || x <= 0.0)
    throw InputError(name + " must be a positive finite number (got " + std::to_string(x) + ")");
}

}  // namespace xstage
