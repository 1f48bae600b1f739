module @torchtpu {
  func.func public @main(%v0: tensor<3x4xf32>, %v1: tensor<3xi64>) -> (tensor<f32>, tensor<f32>, tensor<1xi1>) {
    %v2 = "stablehlo.constant"() {value = dense<-100> : tensor<i64>} : () -> tensor<i64>
    %v3 = "stablehlo.broadcast_in_dim"(%v2) {broadcast_dimensions = array<i64>} : (tensor<i64>) -> tensor<3xi64>
    %v4 = "stablehlo.compare"(%v1, %v3) {comparison_direction = #stablehlo<comparison_direction NE>, compare_type = #stablehlo<comparison_type SIGNED>} : (tensor<3xi64>, tensor<3xi64>) -> tensor<3xi1>
    %v5 = "stablehlo.constant"() {value = dense<4> : tensor<i64>} : () -> tensor<i64>
    %v6 = "stablehlo.broadcast_in_dim"(%v5) {broadcast_dimensions = array<i64>} : (tensor<i64>) -> tensor<3xi64>
    %v7 = "stablehlo.compare"(%v1, %v6) {comparison_direction = #stablehlo<comparison_direction LT>, compare_type = #stablehlo<comparison_type SIGNED>} : (tensor<3xi64>, tensor<3xi64>) -> tensor<3xi1>
    %v8 = "stablehlo.constant"() {value = dense<0> : tensor<3xi64>} : () -> tensor<3xi64>
    %v9 = "stablehlo.compare"(%v1, %v8) {comparison_direction = #stablehlo<comparison_direction GE>, compare_type = #stablehlo<comparison_type SIGNED>} : (tensor<3xi64>, tensor<3xi64>) -> tensor<3xi1>
    %v10 = "stablehlo.and"(%v9, %v7) : (tensor<3xi1>, tensor<3xi1>) -> tensor<3xi1>
    %v11 = "stablehlo.not"(%v4) : (tensor<3xi1>) -> tensor<3xi1>
    %v12 = "stablehlo.or"(%v11, %v10) : (tensor<3xi1>, tensor<3xi1>) -> tensor<3xi1>
    %v13 = "stablehlo.constant"() {value = dense<true> : tensor<i1>} : () -> tensor<i1>
    %v14 = "stablehlo.reduce"(%v12, %v13) ({
    ^bb0(%v15: tensor<i1>, %v16: tensor<i1>):
      %v17 = "stablehlo.and"(%v15, %v16) : (tensor<i1>, tensor<i1>) -> tensor<i1>
      "stablehlo.return"(%v17) : (tensor<i1>) -> ()
    }) {dimensions = array<i64: 0>} : (tensor<3xi1>, tensor<i1>) -> tensor<i1>
    %v18 = "stablehlo.iota"() {iota_dimension = 1 : i64} : () -> tensor<3x4xi64>
    %v19 = "stablehlo.broadcast_in_dim"(%v4) {broadcast_dimensions = array<i64: 0>} : (tensor<3xi1>) -> tensor<3x4xi1>
    %v20 = "stablehlo.broadcast_in_dim"(%v1) {broadcast_dimensions = array<i64: 0>} : (tensor<3xi64>) -> tensor<3x4xi64>
    %v21 = "stablehlo.compare"(%v18, %v20) {comparison_direction = #stablehlo<comparison_direction EQ>, compare_type = #stablehlo<comparison_type SIGNED>} : (tensor<3x4xi64>, tensor<3x4xi64>) -> tensor<3x4xi1>
    %v22 = "stablehlo.and"(%v21, %v19) : (tensor<3x4xi1>, tensor<3x4xi1>) -> tensor<3x4xi1>
    %v23 = "stablehlo.convert"(%v4) : (tensor<3xi1>) -> tensor<3xui8>
    %v24 = "stablehlo.convert"(%v23) : (tensor<3xui8>) -> tensor<3xf32>
    %v25 = "stablehlo.constant"() {value = dense<0x00000000> : tensor<3x4xf32>} : () -> tensor<3x4xf32>
    %v26 = "stablehlo.select"(%v22, %v0, %v25) : (tensor<3x4xi1>, tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<3x4xf32>
    %v27 = "stablehlo.constant"() {value = dense<0x00000000> : tensor<f32>} : () -> tensor<f32>
    %v28 = "stablehlo.reduce"(%v26, %v27) ({
    ^bb0(%v29: tensor<f32>, %v30: tensor<f32>):
      %v31 = "stablehlo.add"(%v29, %v30) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      "stablehlo.return"(%v31) : (tensor<f32>) -> ()
    }) {dimensions = array<i64: 1>} : (tensor<3x4xf32>, tensor<f32>) -> tensor<3xf32>
    %v32 = "stablehlo.multiply"(%v28, %v24) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
    %v33 = "stablehlo.negate"(%v32) : (tensor<3xf32>) -> tensor<3xf32>
    %v34 = "stablehlo.constant"() {value = dense<0x00000000> : tensor<f32>} : () -> tensor<f32>
    %v35 = "stablehlo.reduce"(%v33, %v34) ({
    ^bb0(%v36: tensor<f32>, %v37: tensor<f32>):
      %v38 = "stablehlo.add"(%v36, %v37) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      "stablehlo.return"(%v38) : (tensor<f32>) -> ()
    }) {dimensions = array<i64: 0>} : (tensor<3xf32>, tensor<f32>) -> tensor<f32>
    %v39 = "stablehlo.constant"() {value = dense<0x00000000> : tensor<f32>} : () -> tensor<f32>
    %v40 = "stablehlo.reduce"(%v24, %v39) ({
    ^bb0(%v41: tensor<f32>, %v42: tensor<f32>):
      %v43 = "stablehlo.add"(%v41, %v42) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      "stablehlo.return"(%v43) : (tensor<f32>) -> ()
    }) {dimensions = array<i64: 0>} : (tensor<3xf32>, tensor<f32>) -> tensor<f32>
    %v44 = "stablehlo.divide"(%v35, %v40) : (tensor<f32>, tensor<f32>) -> tensor<f32>
    %v45 = "stablehlo.reshape"(%v14) : (tensor<i1>) -> tensor<1xi1>
    "func.return"(%v44, %v40, %v45) : (tensor<f32>, tensor<f32>, tensor<1xi1>) -> ()
  }
}
