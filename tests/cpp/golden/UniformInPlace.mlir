module @torchtpu {
  func.func public @main(%v0: tensor<2xui64>) -> (tensor<8xf32>) {
    %v1 = "stablehlo.slice"(%v0) {start_indices = array<i64: 0>, limit_indices = array<i64: 1>, strides = array<i64: 1>} : (tensor<2xui64>) -> tensor<1xui64>
    %v2 = "stablehlo.slice"(%v0) {start_indices = array<i64: 1>, limit_indices = array<i64: 2>, strides = array<i64: 1>} : (tensor<2xui64>) -> tensor<1xui64>
    %v3 = "stablehlo.constant"() {value = dense<11400714819323198485> : tensor<1xui64>} : () -> tensor<1xui64>
    %v4 = "stablehlo.add"(%v2, %v3) : (tensor<1xui64>, tensor<1xui64>) -> tensor<1xui64>
    %v5 = "stablehlo.constant"() {value = dense<30> : tensor<1xui64>} : () -> tensor<1xui64>
    %v6 = "stablehlo.shift_right_logical"(%v4, %v5) : (tensor<1xui64>, tensor<1xui64>) -> tensor<1xui64>
    %v7 = "stablehlo.xor"(%v4, %v6) : (tensor<1xui64>, tensor<1xui64>) -> tensor<1xui64>
    %v8 = "stablehlo.constant"() {value = dense<13787848793156543929> : tensor<1xui64>} : () -> tensor<1xui64>
    %v9 = "stablehlo.multiply"(%v7, %v8) : (tensor<1xui64>, tensor<1xui64>) -> tensor<1xui64>
    %v10 = "stablehlo.constant"() {value = dense<27> : tensor<1xui64>} : () -> tensor<1xui64>
    %v11 = "stablehlo.shift_right_logical"(%v9, %v10) : (tensor<1xui64>, tensor<1xui64>) -> tensor<1xui64>
    %v12 = "stablehlo.xor"(%v9, %v11) : (tensor<1xui64>, tensor<1xui64>) -> tensor<1xui64>
    %v13 = "stablehlo.constant"() {value = dense<10723151780598845931> : tensor<1xui64>} : () -> tensor<1xui64>
    %v14 = "stablehlo.multiply"(%v12, %v13) : (tensor<1xui64>, tensor<1xui64>) -> tensor<1xui64>
    %v15 = "stablehlo.constant"() {value = dense<31> : tensor<1xui64>} : () -> tensor<1xui64>
    %v16 = "stablehlo.shift_right_logical"(%v14, %v15) : (tensor<1xui64>, tensor<1xui64>) -> tensor<1xui64>
    %v17 = "stablehlo.xor"(%v14, %v16) : (tensor<1xui64>, tensor<1xui64>) -> tensor<1xui64>
    %v18 = "stablehlo.constant"() {value = dense<30> : tensor<1xui64>} : () -> tensor<1xui64>
    %v19 = "stablehlo.shift_right_logical"(%v1, %v18) : (tensor<1xui64>, tensor<1xui64>) -> tensor<1xui64>
    %v20 = "stablehlo.xor"(%v1, %v19) : (tensor<1xui64>, tensor<1xui64>) -> tensor<1xui64>
    %v21 = "stablehlo.constant"() {value = dense<13787848793156543929> : tensor<1xui64>} : () -> tensor<1xui64>
    %v22 = "stablehlo.multiply"(%v20, %v21) : (tensor<1xui64>, tensor<1xui64>) -> tensor<1xui64>
    %v23 = "stablehlo.constant"() {value = dense<27> : tensor<1xui64>} : () -> tensor<1xui64>
    %v24 = "stablehlo.shift_right_logical"(%v22, %v23) : (tensor<1xui64>, tensor<1xui64>) -> tensor<1xui64>
    %v25 = "stablehlo.xor"(%v22, %v24) : (tensor<1xui64>, tensor<1xui64>) -> tensor<1xui64>
    %v26 = "stablehlo.constant"() {value = dense<10723151780598845931> : tensor<1xui64>} : () -> tensor<1xui64>
    %v27 = "stablehlo.multiply"(%v25, %v26) : (tensor<1xui64>, tensor<1xui64>) -> tensor<1xui64>
    %v28 = "stablehlo.constant"() {value = dense<31> : tensor<1xui64>} : () -> tensor<1xui64>
    %v29 = "stablehlo.shift_right_logical"(%v27, %v28) : (tensor<1xui64>, tensor<1xui64>) -> tensor<1xui64>
    %v30 = "stablehlo.xor"(%v27, %v29) : (tensor<1xui64>, tensor<1xui64>) -> tensor<1xui64>
    %v31 = "stablehlo.xor"(%v30, %v17) : (tensor<1xui64>, tensor<1xui64>) -> tensor<1xui64>
    %v32 = "stablehlo.constant"() {value = dense<30> : tensor<1xui64>} : () -> tensor<1xui64>
    %v33 = "stablehlo.shift_right_logical"(%v31, %v32) : (tensor<1xui64>, tensor<1xui64>) -> tensor<1xui64>
    %v34 = "stablehlo.xor"(%v31, %v33) : (tensor<1xui64>, tensor<1xui64>) -> tensor<1xui64>
    %v35 = "stablehlo.constant"() {value = dense<13787848793156543929> : tensor<1xui64>} : () -> tensor<1xui64>
    %v36 = "stablehlo.multiply"(%v34, %v35) : (tensor<1xui64>, tensor<1xui64>) -> tensor<1xui64>
    %v37 = "stablehlo.constant"() {value = dense<27> : tensor<1xui64>} : () -> tensor<1xui64>
    %v38 = "stablehlo.shift_right_logical"(%v36, %v37) : (tensor<1xui64>, tensor<1xui64>) -> tensor<1xui64>
    %v39 = "stablehlo.xor"(%v36, %v38) : (tensor<1xui64>, tensor<1xui64>) -> tensor<1xui64>
    %v40 = "stablehlo.constant"() {value = dense<10723151780598845931> : tensor<1xui64>} : () -> tensor<1xui64>
    %v41 = "stablehlo.multiply"(%v39, %v40) : (tensor<1xui64>, tensor<1xui64>) -> tensor<1xui64>
    %v42 = "stablehlo.constant"() {value = dense<31> : tensor<1xui64>} : () -> tensor<1xui64>
    %v43 = "stablehlo.shift_right_logical"(%v41, %v42) : (tensor<1xui64>, tensor<1xui64>) -> tensor<1xui64>
    %v44 = "stablehlo.xor"(%v41, %v43) : (tensor<1xui64>, tensor<1xui64>) -> tensor<1xui64>
    %v45 = "stablehlo.constant"() {value = dense<0> : tensor<1xui64>} : () -> tensor<1xui64>
    %v46 = "stablehlo.concatenate"(%v44, %v45) {dimension = 0 : i64} : (tensor<1xui64>, tensor<1xui64>) -> tensor<2xui64>
    %v47 = "stablehlo.constant"() {value = dense<0x40000000> : tensor<8xf32>} : () -> tensor<8xf32>
    %v48 = "stablehlo.constant"() {value = dense<0x40A00000> : tensor<8xf32>} : () -> tensor<8xf32>
    %m49:2 = "stablehlo.rng_bit_generator"(%v46) {rng_algorithm = #stablehlo<rng_algorithm THREE_FRY>} : (tensor<2xui64>) -> (tensor<2xui64>, tensor<8xui32>)
    %v51 = "stablehlo.constant"() {value = dense<8> : tensor<8xui64>} : () -> tensor<8xui64>
    %v52 = "stablehlo.convert"(%v51) : (tensor<8xui64>) -> tensor<8xui32>
    %v53 = "stablehlo.shift_right_logical"(%m49#1, %v52) : (tensor<8xui32>, tensor<8xui32>) -> tensor<8xui32>
    %v54 = "stablehlo.convert"(%v53) : (tensor<8xui32>) -> tensor<8xf32>
    %v55 = "stablehlo.constant"() {value = dense<0x33800000> : tensor<8xf32>} : () -> tensor<8xf32>
    %v56 = "stablehlo.multiply"(%v54, %v55) : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
    %v57 = "stablehlo.subtract"(%v48, %v47) : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
    %v58 = "stablehlo.multiply"(%v56, %v57) : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
    %v59 = "stablehlo.add"(%v58, %v47) : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
    %v60 = "stablehlo.constant"() {value = dense<0x40A00000> : tensor<8xf32>} : () -> tensor<8xf32>
    %v61 = "stablehlo.constant"() {value = dense<0x40000000> : tensor<8xf32>} : () -> tensor<8xf32>
    %v62 = "chlo.next_after"(%v60, %v61) : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
    %v63 = "stablehlo.compare"(%v60, %v62) {comparison_direction = #stablehlo<comparison_direction GT>, compare_type = #stablehlo<comparison_type FLOAT>} : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xi1>
    %v64 = "stablehlo.compare"(%v59, %v60) {comparison_direction = #stablehlo<comparison_direction GE>, compare_type = #stablehlo<comparison_type FLOAT>} : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xi1>
    %v65 = "stablehlo.and"(%v64, %v63) : (tensor<8xi1>, tensor<8xi1>) -> tensor<8xi1>
    %v66 = "stablehlo.select"(%v65, %v62, %v59) : (tensor<8xi1>, tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
    "func.return"(%v66) : (tensor<8xf32>) -> ()
  }
}
