// The forward kernel: composes the tile scheduler, the SM90 mainloop and an epilogue.
//
// 128 * (1 + consumer warpgroups) threads, one CTA per SM, persistent over tiles:
//   warpgroup 0      producer: setmaxnreg down (24 or 32), warp 0 walks the loads, its lane 0 issues them
//   warpgroups 1..n  consumers: setmaxnreg up (240 or 160), wgmma + online softmax + epilogue
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/arch/reg_reconfig.h>
#include <cutlass/pipeline/pipeline.hpp>

#include "attention/key_split.hpp"
#include "attention/mainloop_sm90.hpp"
#include "attention/named_barriers.hpp"
#include "attention/softmax.hpp"
#include "attention/tile_scheduler.hpp"
#include "common/grid_dependency.cuh"

namespace xstage::attention {

// kOwnRowsInPlace: the fused_both kernel, which reads its rank's own rows in place (MainloopSm90); every other kernel
// compiles without that path. kKeySplit: the kernel can split its last partial wave by key range (key_split.hpp; the
// plain kernel): the units of the tail store their parts into Params::partials, which the combine kernel merges.
template <class Config_, template <class> class Epilogue_, bool kOwnRowsInPlace = false, bool kKeySplit = false>
struct FlashFwdKernel {
  using Config = Config_;
  using Epilogue = Epilogue_<Config>;
  using Mainloop = MainloopSm90<Config, kOwnRowsInPlace>;
  using Scheduler = StaticPersistentTileScheduler;
  using PipelineKV = typename Mainloop::PipelineKV;

  struct Params {
    typename Mainloop::Params mainloop;
    typename Epilogue::Params epilogue;
    Scheduler scheduler;
    KeySplit split{};            // kKeySplit only; inactive: every tile whole
    float* partials = nullptr;   // the split's workspace (key_split_workspace_bytes)
  };

  struct SharedStorage {
    typename Mainloop::SharedStorage mainloop;
    typename Epilogue::SharedStorage epilogue;
  };

  static constexpr int kSharedStorageBytes = int(sizeof(SharedStorage));
  static constexpr int kNumThreads = Config::kNumThreads;

  // A part of the split tail: the normalised fp32 output of its key range and its log-sum-exp, row-major into slot
  // `slot` of the workspace ([2·ctas][b_m][d] outputs, then [2·ctas][b_m] log-sum-exps; key_split.hpp).
  template <class FragO, int kRows>
  CUTE_DEVICE static void store_part(float* partials, int ctas, int slot, FragO const& tOrO, float const (&lse)[kRows],
                                     int thread_idx) {
    using namespace cute;
    constexpr int kBlockM = Config::kBlockM, kHeadDim = Config::kHeadDim;
    typename Config::TiledMmaPV tiled_mma;
    auto thr_mma = tiled_mma.get_thread_slice(thread_idx);
    Tensor cO = make_identity_tensor(Shape<Int<kBlockM>, Int<kHeadDim>>{});
    Tensor tOcO = thr_mma.partition_C(cO);
    float* o = partials + std::int64_t{slot} * kBlockM * kHeadDim;
    CUTE_UNROLL
    for (int i = 0; i < size(tOrO); i += 2) {  // C fragments hold column pairs (c, c + 1) of one row
      const int row = get<0>(tOcO(i)), col = get<1>(tOcO(i));
      *reinterpret_cast<float2*>(o + row * kHeadDim + col) = make_float2(tOrO(i), tOrO(i + 1));
    }
    Tensor rowcol = make_tensor(tOcO.data(), accumulator_rowcol(tOcO.layout()));
    static_assert(decltype(size<0>(rowcol))::value == kRows);
    float* part_lse = partials + std::int64_t{2} * ctas * kBlockM * kHeadDim + std::int64_t{slot} * kBlockM;
    if (thread_idx % 4 == 0) {
      CUTE_UNROLL
      for (int r = 0; r < kRows; ++r) part_lse[get<0>(rowcol(r, 0))] = lse[r];
    }
  }

  CUTE_DEVICE static void run(Params const& params, char* smem_raw) {
    using namespace cute;
    SharedStorage& smem = *reinterpret_cast<SharedStorage*>(smem_raw);
    const int warp_group = threadIdx.x / 128;
    const bool is_producer = warp_group == 0;

    if (threadIdx.x == 0) {
      Mainloop::prefetch_descriptors(params.mainloop);
      Epilogue::prefetch_descriptors(params.epilogue);
      Mainloop::init_q_barriers(smem.mainloop);
    }

    typename PipelineKV::Params pipeline_params;
    pipeline_params.transaction_bytes = Config::kKVBlockBytes;
    pipeline_params.role = is_producer ? PipelineKV::ThreadCategory::Producer : PipelineKV::ThreadCategory::Consumer;
    pipeline_params.is_leader = threadIdx.x == 0;
    pipeline_params.num_consumers = Config::kNumMmaThreads;
    PipelineKV pipeline_k(smem.mainloop.pipeline_k, pipeline_params, Shape<_1, _1, _1>{});
    PipelineKV pipeline_v(smem.mainloop.pipeline_v, pipeline_params, Shape<_1, _1, _1>{});
    __syncthreads();  // barrier initialisation visible to every thread (and to the TMA unit)
    // Launched to start early (the fused kernels in the Ulysses layer's chain): the kernels before have finished.
    wait_for_prior_grids();

    const Scheduler& scheduler = params.scheduler;
    // With a split tail the whole tiles end where the tail begins; its units follow each CTA's whole tiles.
    const bool split = kKeySplit && params.split.active();
    const int whole_end = split ? params.split.whole_tiles() : scheduler.num_tiles();
    if (is_producer) {
      cutlass::arch::warpgroup_reg_dealloc<Config::kProducerRegisters>();
      if (threadIdx.x < 32) {  // the producer warp; its lane 0 is the pipelines' leader (is_leader above)
        auto k_state = cutlass::make_producer_start_state<PipelineKV>();
        auto v_state = cutlass::make_producer_start_state<PipelineKV>();
        typename Mainloop::InputWaits input_waits;
        int iteration = 0;
#pragma unroll 1
        for (int tile = scheduler.first_tile(blockIdx.x); tile < whole_end;
             tile = scheduler.next_tile(tile, gridDim.x), ++iteration) {
          // From every CTA's last tile on, the next kernel's CTAs may take the SMs this one's finished CTAs leave.
          if constexpr (!Epilogue::kWaitsForOtherGrids)
            if (!split && !(scheduler.next_tile(tile, gridDim.x) < whole_end)) allow_dependent_grids();
          Mainloop::load(params.mainloop, smem.mainloop, pipeline_k, pipeline_v, k_state, v_state,
                         scheduler.coord(tile), iteration, input_waits);
        }
        if constexpr (kKeySplit) {
          if (split) {
            allow_dependent_grids();  // the combine kernel, which waits for this one to complete
#pragma unroll 1
            for (int i = 0; i < 2; ++i) {
              const KeyUnit unit = params.split.unit(blockIdx.x, i);
              if (unit.empty()) break;
              Mainloop::load(params.mainloop, smem.mainloop, pipeline_k, pipeline_v, k_state, v_state,
                             scheduler.coord(unit.tile), iteration++, input_waits, KeyBlocks{unit.begin, unit.end});
            }
          }
        }
      }
    } else {
      cutlass::arch::warpgroup_reg_alloc<Config::kConsumerRegisters>();
      const int thread_idx = threadIdx.x - 128;
      const int consumer_group = warp_group - 1;
      typename PipelineKV::PipelineState k_state, v_state;
      typename Config::TiledMmaPV tiled_mma_pv;
      Tensor tOrO = partition_fragment_C(tiled_mma_pv, Shape<Int<Config::kBlockM>, Int<Config::kHeadDim>>{});
      OnlineSoftmax<2, Config::kSoftmaxChains, Config::kLoopRowMaxTests> softmax(params.mainloop.softmax_scale);
      float lse[2];

      Mainloop::Turns::give_first_turn(consumer_group);
      Epilogue::begin(params.epilogue, smem.epilogue, thread_idx);
      int iteration = 0;
#pragma unroll 1
      for (int tile = scheduler.first_tile(blockIdx.x); tile < whole_end;
           tile = scheduler.next_tile(tile, gridDim.x), ++iteration) {
        const TileCoord coord = scheduler.coord(tile);
        Mainloop::mma(params.mainloop, smem.mainloop, pipeline_k, pipeline_v, k_state, v_state, tOrO,
                      softmax, coord, thread_idx, iteration);
        softmax.finalize(tOrO, lse);
        Epilogue::store(params.epilogue, smem.epilogue, tOrO, lse, coord, thread_idx);
      }
      if constexpr (kKeySplit) {
        if (split) {
#pragma unroll 1
          for (int i = 0; i < 2; ++i) {
            const KeyUnit unit = params.split.unit(blockIdx.x, i);
            if (unit.empty()) break;
            Mainloop::mma(params.mainloop, smem.mainloop, pipeline_k, pipeline_v, k_state, v_state, tOrO, softmax,
                          scheduler.coord(unit.tile), thread_idx, iteration++, KeyBlocks{unit.begin, unit.end});
            softmax.finalize(tOrO, lse);
            store_part(params.partials, params.split.ctas, unit.slot, tOrO, lse, thread_idx);
          }
        }
      }
      Mainloop::Turns::drain_turns(consumer_group);
      Epilogue::finish(params.epilogue, smem.epilogue, thread_idx);
    }
  }
};

template <class Kernel>
__global__ void __launch_bounds__(Kernel::kNumThreads, 1)
    flash_fwd_sm90_kernel(CUTE_GRID_CONSTANT typename Kernel::Params const params) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  extern __shared__ __align__(1024) char smem[];
  Kernel::run(params, smem);
#endif
}

}  // namespace xstage::attention
