// The last check before a result is shown: every number a command reports (in text or JSON; the text is
// printed from the same values) is finite, and not negative unless it is a margin (the only signed
// quantities: how far a bound holds or is broken). A violation is a program error (exit 1) naming the field,
// never a printed "inf", "-nan" or wrapped-around count.
#pragma once

#include <nlohmann/json.hpp>

namespace xstage {

// Throws xstage::Error("internal error: ...") naming the first offending field by its JSON pointer.
void require_sane_result(const nlohmann::json& result);

}  // namespace xstage
