#include <algorithm>
#include <cmath>

#include "attention/reference.hpp"

namespace xstage::attention {

void reference_attention_cpu(FlashFwdProblem const& p, const uint16_t* q, const uint16_t* k, const uint16_t* v,
                             std::vector<double>& o_ref, std::vector<double>& lse_ref, const int32_t* seqlen_k_per_batch) {
  const int d = p.head_dim;
  o_ref.assign(size_t(p.batch) * p.seqlen_q * p.heads * d, 0.0);
  lse_ref.assign(size_t(p.batch) * p.heads * p.seqlen_q, 0.0);
  std::vector<double> s(p.seqlen_k);
  for (int b = 0; b < p.batch; ++b) {
    const int seqlen_k = seqlen_k_per_batch ? clamp_seqlen_k(seqlen_k_per_batch[b], p.seqlen_k) : p.seqlen_k;
    for (int h = 0; h < p.heads; ++h) {
      for (int m = 0; m < p.seqlen_q; ++m) {
        double mx = -INFINITY;
        for (int n = 0; n < seqlen_k; ++n) {
          double acc = 0.0;
          for (int c = 0; c < d; ++c) {
            acc += double(bf16_bits_to_float(q[bmhd_offset(p.q, b, m, h, c)])) *
                   double(bf16_bits_to_float(k[bmhd_offset(p.k, b, n, h, c)]));
          }
          s[n] = acc * p.softmax_scale;
          mx = std::max(mx, s[n]);
        }
        double sum = 0.0;
        for (int n = 0; n < seqlen_k; ++n) {
          s[n] = std::exp(s[n] - mx);
          sum += s[n];
        }
        double* o = &o_ref[((size_t(b) * p.seqlen_q + m) * p.heads + h) * d];
        for (int n = 0; n < seqlen_k; ++n) {
          const double w = s[n] / sum;
          for (int c = 0; c < d; ++c) o[c] += w * double(bf16_bits_to_float(v[bmhd_offset(p.v, b, n, h, c)]));
        }
        lse_ref[lse_offset(p.heads, p.seqlen_q, b, h, m)] = mx + std::log(sum);
      }
    }
  }
}

}  // namespace xstage::attention
