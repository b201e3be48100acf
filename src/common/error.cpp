#include "common/error.hpp"

namespace xstage {

void require_input(bool condition, const std::string& message) {
  if (!condition) throw InputError(message);
}

}  // namespace xstage
