module @torchtpu {
  func.func public @main(%v0: tensor<3x4xf32>) -> (tensor<3xf32>, tensor<3xi64>) {
    %v1 = "stablehlo.iota"() {iota_dimension = 1 : i64} : () -> tensor<3x4xi64>
    %v2 = "stablehlo.constant"() {value = dense<0xFF800000> : tensor<f32>} : () -> tensor<f32>
    %v3 = "stablehlo.constant"() {value = dense<9223372036854775807> : tensor<i64>} : () -> tensor<i64>
    %m4:2 = "stablehlo.reduce"(%v0, %v1, %v2, %v3) ({
    ^bb0(%v6: tensor<f32>, %v7: tensor<i64>, %v8: tensor<f32>, %v9: tensor<i64>):
      %v10 = "stablehlo.compare"(%v6, %v8) {comparison_direction = #stablehlo<comparison_direction GT>, compare_type = #stablehlo<comparison_type FLOAT>} : (tensor<f32>, tensor<f32>) -> tensor<i1>
      %v11 = "stablehlo.compare"(%v6, %v8) {comparison_direction = #stablehlo<comparison_direction EQ>, compare_type = #stablehlo<comparison_type FLOAT>} : (tensor<f32>, tensor<f32>) -> tensor<i1>
      %v12 = "stablehlo.compare"(%v6, %v6) {comparison_direction = #stablehlo<comparison_direction NE>, compare_type = #stablehlo<comparison_type FLOAT>} : (tensor<f32>, tensor<f32>) -> tensor<i1>
      %v13 = "stablehlo.compare"(%v8, %v8) {comparison_direction = #stablehlo<comparison_direction NE>, compare_type = #stablehlo<comparison_type FLOAT>} : (tensor<f32>, tensor<f32>) -> tensor<i1>
      %v14 = "stablehlo.not"(%v13) : (tensor<i1>) -> tensor<i1>
      %v15 = "stablehlo.and"(%v12, %v14) : (tensor<i1>, tensor<i1>) -> tensor<i1>
      %v16 = "stablehlo.or"(%v10, %v15) : (tensor<i1>, tensor<i1>) -> tensor<i1>
      %v17 = "stablehlo.and"(%v12, %v13) : (tensor<i1>, tensor<i1>) -> tensor<i1>
      %v18 = "stablehlo.or"(%v11, %v17) : (tensor<i1>, tensor<i1>) -> tensor<i1>
      %v19 = "stablehlo.minimum"(%v7, %v9) : (tensor<i64>, tensor<i64>) -> tensor<i64>
      %v20 = "stablehlo.select"(%v18, %v19, %v9) : (tensor<i1>, tensor<i64>, tensor<i64>) -> tensor<i64>
      %v21 = "stablehlo.select"(%v16, %v7, %v20) : (tensor<i1>, tensor<i64>, tensor<i64>) -> tensor<i64>
      %v22 = "stablehlo.select"(%v16, %v6, %v8) : (tensor<i1>, tensor<f32>, tensor<f32>) -> tensor<f32>
      "stablehlo.return"(%v22, %v21) : (tensor<f32>, tensor<i64>) -> ()
    }) {dimensions = array<i64: 1>} : (tensor<3x4xf32>, tensor<3x4xi64>, tensor<f32>, tensor<i64>) -> (tensor<3xf32>, tensor<3xi64>)
    "func.return"(%m4#0, %m4#1) : (tensor<3xf32>, tensor<3xi64>) -> ()
  }
}
