module @torchtpu {
  func.func public @main(%v0: tensor<2x5xf32>) -> (tensor<2x5xf32>) {
    %v1 = "stablehlo.constant"() {value = dense<0xFF800000> : tensor<f32>} : () -> tensor<f32>
    %v2 = "stablehlo.reduce"(%v0, %v1) ({
    ^bb0(%v3: tensor<f32>, %v4: tensor<f32>):
      %v5 = "stablehlo.maximum"(%v3, %v4) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      %v6 = "stablehlo.compare"(%v4, %v4) {comparison_direction = #stablehlo<comparison_direction NE>, compare_type = #stablehlo<comparison_type FLOAT>} : (tensor<f32>, tensor<f32>) -> tensor<i1>
      %v7 = "stablehlo.select"(%v6, %v4, %v5) : (tensor<i1>, tensor<f32>, tensor<f32>) -> tensor<f32>
      %v8 = "stablehlo.compare"(%v3, %v3) {comparison_direction = #stablehlo<comparison_direction NE>, compare_type = #stablehlo<comparison_type FLOAT>} : (tensor<f32>, tensor<f32>) -> tensor<i1>
      %v9 = "stablehlo.select"(%v8, %v3, %v7) : (tensor<i1>, tensor<f32>, tensor<f32>) -> tensor<f32>
      "stablehlo.return"(%v9) : (tensor<f32>) -> ()
    }) {dimensions = array<i64: 1>} : (tensor<2x5xf32>, tensor<f32>) -> tensor<2xf32>
    %v10 = "stablehlo.reshape"(%v2) : (tensor<2xf32>) -> tensor<2x1xf32>
    %v11 = "stablehlo.broadcast_in_dim"(%v10) {broadcast_dimensions = array<i64: 0, 1>} : (tensor<2x1xf32>) -> tensor<2x5xf32>
    %v12 = "stablehlo.subtract"(%v0, %v11) : (tensor<2x5xf32>, tensor<2x5xf32>) -> tensor<2x5xf32>
    %v13 = "stablehlo.exponential"(%v12) : (tensor<2x5xf32>) -> tensor<2x5xf32>
    %v14 = "stablehlo.constant"() {value = dense<0x00000000> : tensor<f32>} : () -> tensor<f32>
    %v15 = "stablehlo.reduce"(%v13, %v14) ({
    ^bb0(%v16: tensor<f32>, %v17: tensor<f32>):
      %v18 = "stablehlo.add"(%v16, %v17) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      "stablehlo.return"(%v18) : (tensor<f32>) -> ()
    }) {dimensions = array<i64: 1>} : (tensor<2x5xf32>, tensor<f32>) -> tensor<2xf32>
    %v19 = "stablehlo.reshape"(%v15) : (tensor<2xf32>) -> tensor<2x1xf32>
    %v20 = "stablehlo.broadcast_in_dim"(%v19) {broadcast_dimensions = array<i64: 0, 1>} : (tensor<2x1xf32>) -> tensor<2x5xf32>
    %v21 = "stablehlo.divide"(%v13, %v20) : (tensor<2x5xf32>, tensor<2x5xf32>) -> tensor<2x5xf32>
    "func.return"(%v21) : (tensor<2x5xf32>) -> ()
  }
}
