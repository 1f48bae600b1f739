module @torchtpu {
  func.func public @main(%v0: tensor<3xf32>, %v2: tensor<f32>, %v5: tensor<2x3xf32>) -> (tensor<2x3xf32>) {
    %v1 = "stablehlo.broadcast_in_dim"(%v0) {broadcast_dimensions = array<i64: 1>} : (tensor<3xf32>) -> tensor<2x3xf32>
    %v3 = "stablehlo.broadcast_in_dim"(%v2) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<2x3xf32>
    %v4 = "stablehlo.multiply"(%v1, %v3) : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
    %v6 = "stablehlo.add"(%v5, %v4) : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
    "func.return"(%v6) : (tensor<2x3xf32>) -> ()
  }
}
