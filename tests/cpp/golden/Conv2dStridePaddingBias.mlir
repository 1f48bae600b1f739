module @torchtpu {
  func.func public @main(%v0: tensor<1x2x5x5xf32>, %v1: tensor<3x2x3x3xf32>, %v3: tensor<3xf32>) -> (tensor<1x3x3x3xf32>) {
    %v2 = "stablehlo.convolution"(%v0, %v1) {batch_group_count = 1 : i64, dimension_numbers = #stablehlo.conv<[b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1]>, feature_group_count = 1 : i64, lhs_dilation = array<i64: 1, 1>, padding = dense<[[1, 1], [1, 1]]> : tensor<2x2xi64>, rhs_dilation = array<i64: 1, 1>, window_strides = array<i64: 2, 2>} : (tensor<1x2x5x5xf32>, tensor<3x2x3x3xf32>) -> tensor<1x3x3x3xf32>
    %v4 = "stablehlo.broadcast_in_dim"(%v3) {broadcast_dimensions = array<i64: 1>} : (tensor<3xf32>) -> tensor<1x3x3x3xf32>
    %v5 = "stablehlo.add"(%v2, %v4) : (tensor<1x3x3x3xf32>, tensor<1x3x3x3xf32>) -> tensor<1x3x3x3xf32>
    "func.return"(%v5) : (tensor<1x3x3x3xf32>) -> ()
  }
}
