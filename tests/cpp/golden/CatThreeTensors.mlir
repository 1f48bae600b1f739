module @torchtpu {
  func.func public @main(%v0: tensor<2x1xf32>, %v1: tensor<2x2xf32>, %v2: tensor<2x3xf32>) -> (tensor<2x6xf32>) {
    %v3 = "stablehlo.concatenate"(%v0, %v1, %v2) {dimension = 1 : i64} : (tensor<2x1xf32>, tensor<2x2xf32>, tensor<2x3xf32>) -> tensor<2x6xf32>
    "func.return"(%v3) : (tensor<2x6xf32>) -> ()
  }
}
