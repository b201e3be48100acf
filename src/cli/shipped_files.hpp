// Files that ship with xstage (platforms/, tools/), found in a folder above the executable
// (<repo>/build/xstage) or, failing that, in the source tree it was built from.
#pragma once

#include <string>

namespace xstage::cli {

// The path of `relative` (e.g. "platforms/h200_nvlink4.json"); throws InputError listing where it looked.
std::string shipped_file(const std::string& relative);

}  // namespace xstage::cli
