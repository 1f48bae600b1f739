// One registration function per family of lowerings; the table calls each once.
#pragma once

namespace torchtpu::lowering {

void register_elementwise_lowerings();
void register_activation_lowerings();
void register_reduction_lowerings();
void register_matmul_lowerings();
void register_nn_lowerings();
void register_shape_lowerings();
void register_indexing_lowerings();
void register_factory_lowerings();
void register_random_lowerings();
void register_multinomial_lowerings();
void register_sort_lowerings();
void register_elementwise_math_lowerings();
void register_interpolate_lowerings();
void register_patch_lowerings();
void register_pooling_lowerings();
void register_distance_lowerings();
void register_grid_sample_lowerings();
void register_fractional_pool_lowerings();
void register_ctc_loss_lowerings();
void register_incomplete_gamma_lowerings();
void register_unpool_lowerings();
void register_search_lowerings();
void register_index_reduce_lowerings();
void register_rnn_lowerings();
void register_amp_lowerings();
void register_optimizer_lowerings();
void register_assert_lowerings();
void register_embedding_bag_lowerings();
void register_linalg_factor_lowerings();
void register_linalg_decomp_lowerings();
void register_linalg_svd_lowerings();
void register_linalg_eigh_lowerings();
void register_linalg_matrix_exp_lowerings();
void register_complex_lowerings();
void register_fft_lowerings();
void register_weight_norm_lowerings();
// torchtpu:: ops that call host kernels (custom calls; see csrc/kernels).
void register_host_kernel_call_lowerings();
// List ops (_foreach_*): registered last, they look up the per-item lowerings at lowering time.
void register_foreach_lowerings();
// Graph mode only: value-semantics forms of view ops and factories seen in FX graphs.
void register_graph_lowerings();
// Graph mode only: _c10d_functional::* collectives over the graph's replicas.
void register_functional_collective_lowerings();

}  // namespace torchtpu::lowering
