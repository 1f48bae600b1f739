module @torchtpu {
  func.func public @main(%v0: tensor<4xf32>) -> (tensor<4xf32>) {
    %v1 = "stablehlo.constant"() {value = dense<0x3F000000> : tensor<4xf32>} : () -> tensor<4xf32>
    %v2 = "stablehlo.multiply"(%v0, %v1) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %v3 = "stablehlo.constant"() {value = dense<0x3F800000> : tensor<4xf32>} : () -> tensor<4xf32>
    %v4 = "stablehlo.multiply"(%v0, %v0) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %v5 = "stablehlo.multiply"(%v4, %v0) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %v6 = "stablehlo.constant"() {value = dense<0x3D372713> : tensor<4xf32>} : () -> tensor<4xf32>
    %v7 = "stablehlo.multiply"(%v6, %v5) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %v8 = "stablehlo.add"(%v0, %v7) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %v9 = "stablehlo.constant"() {value = dense<0x3F4C422A> : tensor<4xf32>} : () -> tensor<4xf32>
    %v10 = "stablehlo.multiply"(%v9, %v8) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %v11 = "stablehlo.tanh"(%v10) : (tensor<4xf32>) -> tensor<4xf32>
    %v12 = "stablehlo.add"(%v3, %v11) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %v13 = "stablehlo.multiply"(%v2, %v12) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    "func.return"(%v13) : (tensor<4xf32>) -> ()
  }
}
