module @torchtpu {
  func.func public @main(%v0: tensor<3x4xf32>, %v1: tensor<2x3xf32>) -> (tensor<2x4xf32>) {
    %v2 = "stablehlo.dot_general"(%v1, %v0) {dot_dimension_numbers = #stablehlo.dot<lhs_batching_dimensions = [], rhs_batching_dimensions = [], lhs_contracting_dimensions = [1], rhs_contracting_dimensions = [0]>, precision_config = [#stablehlo<precision HIGHEST>, #stablehlo<precision HIGHEST>]} : (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<2x4xf32>
    "func.return"(%v2) : (tensor<2x4xf32>) -> ()
  }
}
