module @torchtpu {
  func.func public @main(%v0: tensor<2x3x4xf32>) -> (tensor<2x1x4xf32>) {
    %v1 = "stablehlo.constant"() {value = dense<0x00000000> : tensor<f32>} : () -> tensor<f32>
    %v2 = "stablehlo.reduce"(%v0, %v1) ({
    ^bb0(%v3: tensor<f32>, %v4: tensor<f32>):
      %v5 = "stablehlo.add"(%v3, %v4) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      "stablehlo.return"(%v5) : (tensor<f32>) -> ()
    }) {dimensions = array<i64: 1>} : (tensor<2x3x4xf32>, tensor<f32>) -> tensor<2x4xf32>
    %v6 = "stablehlo.reshape"(%v2) : (tensor<2x4xf32>) -> tensor<2x1x4xf32>
    "func.return"(%v6) : (tensor<2x1x4xf32>) -> ()
  }
}
