module @torchtpu {
  func.func public @main(%v0: tensor<2x3xf32>, %v1: tensor<2xi64>) -> (tensor<2x2xf32>, tensor<1xi1>) {
    %v2 = "stablehlo.constant"() {value = dense<0> : tensor<i64>} : () -> tensor<i64>
    %v3 = "stablehlo.broadcast_in_dim"(%v2) {broadcast_dimensions = array<i64>} : (tensor<i64>) -> tensor<2xi64>
    %v4 = "stablehlo.constant"() {value = dense<3> : tensor<i64>} : () -> tensor<i64>
    %v5 = "stablehlo.broadcast_in_dim"(%v4) {broadcast_dimensions = array<i64>} : (tensor<i64>) -> tensor<2xi64>
    %v6 = "stablehlo.compare"(%v1, %v5) {comparison_direction = #stablehlo<comparison_direction LT>, compare_type = #stablehlo<comparison_type SIGNED>} : (tensor<2xi64>, tensor<2xi64>) -> tensor<2xi1>
    %v7 = "stablehlo.compare"(%v1, %v3) {comparison_direction = #stablehlo<comparison_direction GE>, compare_type = #stablehlo<comparison_type SIGNED>} : (tensor<2xi64>, tensor<2xi64>) -> tensor<2xi1>
    %v8 = "stablehlo.and"(%v7, %v6) : (tensor<2xi1>, tensor<2xi1>) -> tensor<2xi1>
    %v9 = "stablehlo.constant"() {value = dense<true> : tensor<i1>} : () -> tensor<i1>
    %v10 = "stablehlo.reduce"(%v8, %v9) ({
    ^bb0(%v11: tensor<i1>, %v12: tensor<i1>):
      %v13 = "stablehlo.and"(%v11, %v12) : (tensor<i1>, tensor<i1>) -> tensor<i1>
      "stablehlo.return"(%v13) : (tensor<i1>) -> ()
    }) {dimensions = array<i64: 0>} : (tensor<2xi1>, tensor<i1>) -> tensor<i1>
    %v14 = "stablehlo.broadcast_in_dim"(%v10) {broadcast_dimensions = array<i64>} : (tensor<i1>) -> tensor<2xi1>
    %v15 = "stablehlo.select"(%v14, %v1, %v5) : (tensor<2xi1>, tensor<2xi64>, tensor<2xi64>) -> tensor<2xi64>
    %v16 = "stablehlo.reshape"(%v15) : (tensor<2xi64>) -> tensor<2x1xi64>
    %v17 = "stablehlo.gather"(%v0, %v16) {dimension_numbers = #stablehlo.gather<offset_dims = [0], collapsed_slice_dims = [1], start_index_map = [1], index_vector_dim = 1>, slice_sizes = array<i64: 2, 1>, indices_are_sorted = false} : (tensor<2x3xf32>, tensor<2x1xi64>) -> tensor<2x2xf32>
    %v18 = "stablehlo.reshape"(%v10) : (tensor<i1>) -> tensor<1xi1>
    "func.return"(%v17, %v18) : (tensor<2x2xf32>, tensor<1xi1>) -> ()
  }
}
