#include "cli/shipped_files.hpp"

#include <filesystem>
#include <vector>

#include "common/error.hpp"

namespace xstage::cli {

std::string shipped_file(const std::string& relative) {
  namespace fs = std::filesystem;
  std::vector<fs::path> candidates;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  // Every folder above the executable: <repo>/build/xstage, a copied bin/ folder inside the repo, ...
  if (!ec)
    for (fs::path dir = exe.parent_path(); !dir.empty() && dir != dir.root_path(); dir = dir.parent_path())
      candidates.push_back(dir / relative);
#ifdef XSTAGE_SOURCE_DIR
  candidates.push_back(fs::path(XSTAGE_SOURCE_DIR) / relative);
#endif
  std::string looked;
  for (const fs::path& c : candidates) {
    if (fs::exists(c, ec)) return fs::weakly_canonical(c, ec).string();
    looked += (looked.empty() ? "" : ", ") + c.string();
  }
  throw InputError("the shipped file " + relative + " was not found (looked in: " + looked + ")");
}

}  // namespace xstage::cli
