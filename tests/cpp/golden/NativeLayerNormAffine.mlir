module @torchtpu {
  func.func public @main(%v0: tensor<2x3xf32>, %v25: tensor<3xf32>, %v28: tensor<3xf32>) -> (tensor<2x3xf32>, tensor<2x1xf32>, tensor<2x1xf32>) {
    %v1 = "stablehlo.constant"() {value = dense<0x00000000> : tensor<f32>} : () -> tensor<f32>
    %v2 = "stablehlo.reduce"(%v0, %v1) ({
    ^bb0(%v3: tensor<f32>, %v4: tensor<f32>):
      %v5 = "stablehlo.add"(%v3, %v4) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      "stablehlo.return"(%v5) : (tensor<f32>) -> ()
    }) {dimensions = array<i64: 1>} : (tensor<2x3xf32>, tensor<f32>) -> tensor<2xf32>
    %v6 = "stablehlo.reshape"(%v2) : (tensor<2xf32>) -> tensor<2x1xf32>
    %v7 = "stablehlo.constant"() {value = dense<0x40400000> : tensor<2x1xf32>} : () -> tensor<2x1xf32>
    %v8 = "stablehlo.divide"(%v6, %v7) : (tensor<2x1xf32>, tensor<2x1xf32>) -> tensor<2x1xf32>
    %v9 = "stablehlo.broadcast_in_dim"(%v8) {broadcast_dimensions = array<i64: 0, 1>} : (tensor<2x1xf32>) -> tensor<2x3xf32>
    %v10 = "stablehlo.subtract"(%v0, %v9) : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
    %v11 = "stablehlo.multiply"(%v10, %v10) : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
    %v12 = "stablehlo.constant"() {value = dense<0x00000000> : tensor<f32>} : () -> tensor<f32>
    %v13 = "stablehlo.reduce"(%v11, %v12) ({
    ^bb0(%v14: tensor<f32>, %v15: tensor<f32>):
      %v16 = "stablehlo.add"(%v14, %v15) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      "stablehlo.return"(%v16) : (tensor<f32>) -> ()
    }) {dimensions = array<i64: 1>} : (tensor<2x3xf32>, tensor<f32>) -> tensor<2xf32>
    %v17 = "stablehlo.reshape"(%v13) : (tensor<2xf32>) -> tensor<2x1xf32>
    %v18 = "stablehlo.constant"() {value = dense<0x40400000> : tensor<2x1xf32>} : () -> tensor<2x1xf32>
    %v19 = "stablehlo.divide"(%v17, %v18) : (tensor<2x1xf32>, tensor<2x1xf32>) -> tensor<2x1xf32>
    %v20 = "stablehlo.constant"() {value = dense<0x3727C5AC> : tensor<2x1xf32>} : () -> tensor<2x1xf32>
    %v21 = "stablehlo.add"(%v19, %v20) : (tensor<2x1xf32>, tensor<2x1xf32>) -> tensor<2x1xf32>
    %v22 = "stablehlo.rsqrt"(%v21) : (tensor<2x1xf32>) -> tensor<2x1xf32>
    %v23 = "stablehlo.broadcast_in_dim"(%v22) {broadcast_dimensions = array<i64: 0, 1>} : (tensor<2x1xf32>) -> tensor<2x3xf32>
    %v24 = "stablehlo.multiply"(%v10, %v23) : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
    %v26 = "stablehlo.broadcast_in_dim"(%v25) {broadcast_dimensions = array<i64: 1>} : (tensor<3xf32>) -> tensor<2x3xf32>
    %v27 = "stablehlo.multiply"(%v24, %v26) : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
    %v29 = "stablehlo.broadcast_in_dim"(%v28) {broadcast_dimensions = array<i64: 1>} : (tensor<3xf32>) -> tensor<2x3xf32>
    %v30 = "stablehlo.add"(%v27, %v29) : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
    "func.return"(%v30, %v8, %v22) : (tensor<2x3xf32>, tensor<2x1xf32>, tensor<2x1xf32>) -> ()
  }
}
