"""CUDA backend lowering: the OpenMP emitter's op dispatch, fusion and buffer plan, rendered
against the CUDA op layer (ops.cuh: the same mg::op names on device memory).

What differs from the CPU is below the op layer (kernels/*.cuh) and in the ABI's data movement
(the template's device_memory sections: inputs uploaded once at prepare).  This class only says
so, and refuses, with the op's location in the program, what the CUDA op layer does not run yet:
an unsupported op must be a compile-time error, never a kernel that is missing at build time.
"""
from __future__ import annotations

from morphgen.backends.openmp.emitter import OpenMPEmitter, UnsupportedInput

# The calls of the generated code that ops.cuh implements (the kernel names the emitter records).
SUPPORTED = frozenset({
    "mg::op::aggregate", "mg::op::aggregate_transpose", "mg::op::aggregate_max_grad",
    "mg::op::linear", "mg::op::matmul_nt", "mg::op::matmul_tn",
    "mg::op::linear_features", "mg::op::matmul_tn_features", "mg::op::dropout_features",
    "mg::op::dropout", "mg::op::dropout_grad", "mg::op::dropout_act_grad", "mg::op::act_grad",
    "mg::op::feature_sum", "mg::op::cross_entropy", "mg::op::cross_entropy_grad",
    "mg::op::adam", "mg::op::adam_rows", "mg::op::sgd", "mg::op::gather", "mg::op::scatter", "mg::op::scatter_max_grad",
    "mg::op::weighted_gather_scatter", "mg::op::edge_dot",
    "mg::relu_fwd", "mg::leaky_relu_fwd", "mg::elu_fwd", "mg::exp_fwd", "mg::sigmoid_fwd", "mg::tanh_fwd",
    "mg::neg_fwd", "mg::scale", "mg::binary_fwd", "mg::scaled_add", "mg::bias_add", "mg::row_sum", "mg::rowwise_dot_fwd",
    "mg::edge_softmax_fwd", "mg::edge_softmax_bwd", "mg::edge_attention_fwd", "mg::edge_softmax_act_bwd",
    "mg::op::typed_linear", "mg::op::typed_matmul_nt", "mg::op::typed_matmul_tn", "mg::op::typed_row_sum",
    "mg::op::embedding_rows", "mg::op::embedding_rows_grad", "mg::op::embedding_rows_grad_rows",
    "mg::op::copy",
    "mg::op::matvec", "mg::op::matvec_t", "mg::op::outer", "mg::op::in_degree", "mg::op::out_degree",
    "mg::op::rel_degree", "mg::op::edge_weight", "mg::op::gcn_norm", "mg::op::mean_norm",
    "mg::op::slice", "mg::op::row_concat", "mg::concat_fwd", "mg::math_fwd", "mg::math_bwd",
    "mg::row_softmax_fwd", "mg::row_softmax_bwd", "mg::head_mul", "mg::head_sum", "mg::head_repeat",
    "mg::head_mul_add", "mg::head_mul_row_sum",
    "mg::layer_standardize_fwd", "mg::layer_standardize_bwd", "mg::batch_standardize_fwd", "mg::batch_standardize_bwd",
    "mg::batch_norm_affine_fwd", "mg::batch_norm_affine_bwd",
    "mg::op::link_loss", "mg::op::link_loss_grad", "mg::op::link_loss_rel_grad",
    "mg::op::basis_lookup", "mg::op::basis_lookup_coef_grad", "mg::op::basis_lookup_bases_grad",
    "mg::op::edge_typed_linear", "mg::op::edge_typed_linear_input_grad", "mg::op::edge_typed_linear_weight_grad",
    "mg::op::edge_typed_linear_features", "mg::op::edge_typed_linear_weight_grad_features",
})
# Load-time graph arrays (Graph::build_*) the CUDA op layer builds.
SUPPORTED_GRAPH_ARRAYS = frozenset({"edge_dst", "node_ids", "etypes", "ntypes", "weighted_gcn_scale"})


class CUDAEmitter(OpenMPEmitter):
    backend = "cuda"
    ops_header = "ops.cuh"
    ops_units = ()
    device_memory = True
    source_name = "model.cu"
    spmm_tile_by_width = False       # aggregate.cuh strides the features by threads: no tile to choose
    narrow_tn_by_width = False       # weight gradients go to cuBLAS
    residual_epilogues = False       # the add stays one kernel with its tail: cuBLAS's product would need
                                     # a pass of its own to add the residual, as the add does
    typed_bias_epilogues = False     # ops.cuh's products take a bias per column only
    traverses_edge_rows = False      # ops.cuh's traversals read node rows at an edge end only
    reads_train_rows_only = False    # ops.cuh reduces gradients over every row (the training rows are not grouped)
    shares_basis_lookup_sums = True  # the basis lookups' gradients sum G per pair first (segment_sum): once

    def softmax_edges_arg(self) -> str:
        return ", m.g"     # ops.cuh: with_softmax_groups (the lane groups' size, the long rows' blocks)

    def _refuse(self, what: str) -> UnsupportedInput:
        """A located error for something of the program that ops.cuh cannot run."""
        op = self.current_op
        opcode = f" ('{op.opcode}')" if op is not None else ""
        return UnsupportedInput(op, f"{what}{opcode} is not available on the cuda backend yet; train this "
                                    f"program with --backend openmp")

    def around(self, op, lines: list) -> list:
        """Every kernel the OpenMP lowering chose for ``op`` must exist in ops.cuh."""
        row = self.plan_rows[-1] if self.plan_rows else None
        if row is not None and row["op"] is op:
            for kernel in row["kernels"]:
                if kernel not in SUPPORTED:
                    name = kernel.split("::")[-1]
                    raise self._refuse(f"the {name.replace('_', ' ')} kernel")
        return lines

    def require(self, what: str) -> None:
        if what not in SUPPORTED_GRAPH_ARRAYS:
            raise self._refuse(f"the load-time graph array '{what}'")
        super().require(what)
