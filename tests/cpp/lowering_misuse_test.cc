// A lowering that misuses the Builder (operands of different types, a broadcast to a lower
// rank) gets an internal error naming the op from lower_op; the process does not abort.
// The misuse is recorded once, and the lowering still returns values of the expected types.
#include <gtest/gtest.h>

#include "lowering/lowering.h"
#include "lowering_harness.h"

namespace torchtpu::testing {
namespace {

using base::DType;
using lowering::Value;

TEST(BuilderMisuse, IsRecordedNotAnAbort) {
  lowering::Builder b;
  Value f = b.param(TensorType{DType::kF32, {2, 3}});
  Value i = b.param(TensorType{DType::kI32, {2, 3}});
  Value sum = b.add(f, i);
  EXPECT_EQ(sum.type, f.type);
  EXPECT_NE(b.misuse_error().find("operands differ in type"), std::string::npos)
      << b.misuse_error();
  // Later misuses keep the first message.
  Value wide = b.broadcast_to(b.param(TensorType{DType::kF32, {5, 2, 3}}), {2, 3});
  EXPECT_EQ(wide.dims(), (Dims{2, 3}));
  EXPECT_NE(b.misuse_error().find("tensor<2x3xf32>"), std::string::npos) << b.misuse_error();
}

TEST(BuilderMisuse, EachHelperReportsIt) {
  {
    lowering::Builder b;
    b.broadcast_to(b.param(TensorType{DType::kF32, {5, 1, 2, 3}}), {1, 2, 3});
    EXPECT_NE(b.misuse_error().find("target rank smaller"), std::string::npos);
  }
  {
    lowering::Builder b;
    b.compare(b.param(TensorType{DType::kF64, {2}}), b.param(TensorType{DType::kF32, {2}}), "LT");
    EXPECT_NE(b.misuse_error().find("compare"), std::string::npos);
  }
  {
    lowering::Builder b;
    b.concatenate({}, 0);
    EXPECT_NE(b.misuse_error().find("concatenate"), std::string::npos);
  }
  lowering::Builder ok;
  Value x = ok.param(TensorType{DType::kF32, {2}});
  ok.add(x, x);
  EXPECT_TRUE(ok.misuse_error().empty());
}

TEST(BuilderMisuse, LowerOpReturnsAnInternalErrorNamingTheOp) {
  ASSERT_NE(lowering::find_lowering("aten::add.Tensor"), nullptr);  // the table is built
  lowering::register_lowering({"torchtpu_test::mixes_dtypes"}, [](lowering::LoweringContext& c)
                                  -> base::StatusOr<std::vector<Value>> {
    return std::vector<Value>{c.b().add(c.tensor(0), c.tensor(1))};
  });
  HostTensor f = arange(DType::kF32, {3});
  HostTensor i = arange(DType::kI64, {3});
  auto lowered = lowering::lower_op("torchtpu_test::mixes_dtypes", {tensor_arg(f), tensor_arg(i)},
                                    {f.type});
  ASSERT_FALSE(lowered.ok());
  EXPECT_EQ(lowered.status().code(), base::StatusCode::kInternal);
  EXPECT_NE(lowered.status().message().find("torchtpu_test::mixes_dtypes"), std::string::npos)
      << lowered.status().message();
  lowering::remove_lowering("torchtpu_test::mixes_dtypes");
}

}  // namespace
}  // namespace torchtpu::testing
