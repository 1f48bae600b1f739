module @torchtpu {
  func.func public @main(%v0: tensor<2x4x5xf32>, %v1: tensor<2x3x4xf32>) -> (tensor<2x3x5xf32>) {
    %v2 = "stablehlo.dot_general"(%v1, %v0) {dot_dimension_numbers = #stablehlo.dot<lhs_batching_dimensions = [0], rhs_batching_dimensions = [0], lhs_contracting_dimensions = [2], rhs_contracting_dimensions = [1]>, precision_config = [#stablehlo<precision HIGHEST>, #stablehlo<precision HIGHEST>]} : (tensor<2x3x4xf32>, tensor<2x4x5xf32>) -> tensor<2x3x5xf32>
    "func.return"(%v2) : (tensor<2x3x5xf32>) -> ()
  }
}
