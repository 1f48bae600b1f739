module @torchtpu {
  func.func public @main(%v0: tensor<f32>, %v2: tensor<4xi64>) -> (tensor<4xf32>) {
    %v1 = "stablehlo.broadcast_in_dim"(%v0) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<4xf32>
    %v3 = "stablehlo.convert"(%v2) : (tensor<4xi64>) -> tensor<4xf32>
    %v4 = "stablehlo.multiply"(%v3, %v1) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    "func.return"(%v4) : (tensor<4xf32>) -> ()
  }
}
