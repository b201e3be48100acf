// Tile shape per head dim: the single table both the kernel configuration (flash_fwd_tile_config.hpp)
// and the reports read. Plain C++ so CPU code can print it without CuTe.
#pragma once

namespace xstage::attention {

struct FwdTileShape {
  int block_m;  // query rows per CTA tile (two consumer warpgroups x 64)
  int block_n;  // key/value rows per pipeline stage
  int stages;   // K and V pipeline depth
};

constexpr FwdTileShape fwd_tile_shape(int head_dim) {
  return head_dim == 64 ? FwdTileShape{128, 192, 3} : FwdTileShape{128, 128, 2};
}

}  // namespace xstage::attention
