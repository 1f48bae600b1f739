module @torchtpu {
  func.func public @main(%v0: tensor<3xf32>, %v2: tensor<2x1xi64>) -> (tensor<2x3xi1>) {
    %v1 = "stablehlo.broadcast_in_dim"(%v0) {broadcast_dimensions = array<i64: 1>} : (tensor<3xf32>) -> tensor<2x3xf32>
    %v3 = "stablehlo.convert"(%v2) : (tensor<2x1xi64>) -> tensor<2x1xf32>
    %v4 = "stablehlo.broadcast_in_dim"(%v3) {broadcast_dimensions = array<i64: 0, 1>} : (tensor<2x1xf32>) -> tensor<2x3xf32>
    %v5 = "stablehlo.compare"(%v4, %v1) {comparison_direction = #stablehlo<comparison_direction LT>, compare_type = #stablehlo<comparison_type FLOAT>} : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xi1>
    "func.return"(%v5) : (tensor<2x3xi1>) -> ()
  }
}
