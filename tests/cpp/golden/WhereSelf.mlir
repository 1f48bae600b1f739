module @torchtpu {
  func.func public @main(%v0: tensor<2x3xi1>, %v1: tensor<3xf32>, %v3: tensor<2x3xf32>) -> (tensor<2x3xf32>) {
    %v2 = "stablehlo.broadcast_in_dim"(%v1) {broadcast_dimensions = array<i64: 1>} : (tensor<3xf32>) -> tensor<2x3xf32>
    %v4 = "stablehlo.select"(%v0, %v3, %v2) : (tensor<2x3xi1>, tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
    "func.return"(%v4) : (tensor<2x3xf32>) -> ()
  }
}
