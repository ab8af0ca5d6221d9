// The device interface the model host runs steps through, on every registered device: a graph
// prepared once runs many times with new inputs; submissions run in order without waits in
// between (a later graph sees an earlier one's writes); copies and zero-fills run in that order
// too; misuse is an error, never a hang.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "op_harness.hpp"

namespace kiln::test {
namespace {

using backend::BackendError;
using backend::BoundGraph;
using backend::Buffer;
using backend::CopyRegion;
using backend::Device;
using backend::Node;
using backend::TensorRef;

class OnEveryDevice : public ::testing::TestWithParam<Device*> {
 protected:
  Device& dev() { return *GetParam(); }
  TensorRef tensor(int64_t n, std::vector<std::unique_ptr<Buffer>>& keep, float fill = 0.0f) {
    keep.push_back(dev().allocate(static_cast<size_t>(n) * 4, backend::BufferUsage::activations));
    std::vector<float> v(static_cast<size_t>(n), fill);
    keep.back()->upload(0, v.data(), v.size() * 4);
    return {keep.back().get(), 0, TensorDesc(DType::f32, {n})};
  }
  static std::vector<float> read(const TensorRef& t) {
    std::vector<float> v(static_cast<size_t>(t.desc.numel()));
    t.buffer->download(t.offset, v.data(), v.size() * 4);
    return v;
  }
  static Node unary(kiln_op op, const TensorRef& x, const TensorRef& y, float scale = 1.0f, float bias = 0.0f) {
    Node n;
    n.op = op;
    n.n_src = 1;
    n.src[0] = x;
    n.dst = y;
    n.params.scale = scale;
    n.params.bias = bias;
    return n;
  }
};

TEST_P(OnEveryDevice, APreparedGraphRunsManyTimesOnNewInputs) {
  std::vector<std::unique_ptr<Buffer>> keep;
  const TensorRef x = tensor(300, keep), y = tensor(300, keep);
  BoundGraph g;
  g.nodes.push_back(unary(KILN_OP_SCALE, x, y, 2.0f, 1.0f));
  auto exe = dev().prepare(g);
  for (int run = 0; run < 5; ++run) {
    std::vector<float> in(300, static_cast<float>(run));
    x.buffer->upload(0, in.data(), in.size() * 4);
    dev().submit(*exe);
    dev().wait(*exe);
    const auto out = read(y);
    EXPECT_EQ(out[7], 2.0f * static_cast<float>(run) + 1.0f) << "run " << run;
  }
  dev().wait(*exe);  // nothing pending: returns at once
}

TEST_P(OnEveryDevice, SubmissionsAndCopiesRunInOrderWithoutWaitsBetween) {
  // a = x·2 (graph 1); b <- a (copy); c = b + 1 (graph 2); b's first half zeroed (fill) after c.
  std::vector<std::unique_ptr<Buffer>> keep;
  const int64_t n = 4096;
  const TensorRef x = tensor(n, keep, 3.0f), a = tensor(n, keep, -1.0f), b = tensor(n, keep, -1.0f),
                  c = tensor(n, keep, -1.0f);
  BoundGraph g1, g2;
  g1.nodes.push_back(unary(KILN_OP_SCALE, x, a, 2.0f));
  g2.nodes.push_back(unary(KILN_OP_SCALE, b, c, 1.0f, 1.0f));
  auto e1 = dev().prepare(g1), e2 = dev().prepare(g2);
  for (int round = 0; round < 3; ++round) {
    dev().submit(*e1);
    dev().copy({CopyRegion{a.buffer, 0, b.buffer, 0, static_cast<size_t>(n) * 4}});
    dev().submit(*e2);
    dev().copy({CopyRegion{nullptr, 0, b.buffer, 0, static_cast<size_t>(n) * 2}});
    dev().wait(*e2);
    dev().wait(*e1);
    dev().sync();
    const auto bv = read(b), cv = read(c);
    EXPECT_EQ(cv[0], 7.0f);
    EXPECT_EQ(cv[n - 1], 7.0f);
    EXPECT_EQ(bv[0], 0.0f);
    EXPECT_EQ(bv[n / 2 - 1], 0.0f);
    EXPECT_EQ(bv[n / 2], 6.0f);
    std::vector<float> reset(static_cast<size_t>(n), -1.0f);
    for (const TensorRef* t : {&a, &b, &c}) t->buffer->upload(0, reset.data(), reset.size() * 4);
  }
}

TEST_P(OnEveryDevice, CopiesAfterTheNodesLandInReadbackMemoryWithinTheRun) {
  std::vector<std::unique_ptr<Buffer>> keep;
  const TensorRef x = tensor(1000, keep, 2.0f), y = tensor(1000, keep);
  keep.push_back(dev().allocate(8192, backend::BufferUsage::readback));
  Buffer* rb = keep.back().get();
  BoundGraph g;
  g.nodes.push_back(unary(KILN_OP_SCALE, x, y, 3.0f, 1.0f));
  g.copies_after.push_back({y.buffer, 400, rb, 256, 2400});  // elements 100 .. 699
  auto exe = dev().prepare(g);
  for (float v : {2.0f, 5.0f}) {
    std::vector<float> in(1000, v);
    x.buffer->upload(0, in.data(), in.size() * 4);
    dev().submit(*exe);
    dev().wait(*exe);
    std::vector<float> out(600);
    rb->download(256, out.data(), out.size() * 4);
    EXPECT_EQ(out.front(), 3.0f * v + 1.0f);
    EXPECT_EQ(out.back(), 3.0f * v + 1.0f);
  }
  BoundGraph bad = g;
  bad.copies_after[0].bytes = 8000;  // past the readback buffer
  EXPECT_THROW(dev().prepare(bad), BackendError);
}

TEST_P(OnEveryDevice, ASecondSubmitBeforeTheWaitIsRefused) {
  std::vector<std::unique_ptr<Buffer>> keep;
  const TensorRef x = tensor(64, keep), y = tensor(64, keep);
  BoundGraph g;
  g.nodes.push_back(unary(KILN_OP_SILU, x, y));
  auto exe = dev().prepare(g);
  dev().submit(*exe);
  try {
    dev().submit(*exe);
    ADD_FAILURE() << "submitted twice";
  } catch (const BackendError& e) {
    EXPECT_EQ(e.kind(), BackendError::Kind::invalid);
    EXPECT_NE(std::string(e.what()).find("before its last run was waited for"), std::string::npos) << e.what();
  }
  dev().wait(*exe);
  dev().submit(*exe);  // fine again
  dev().wait(*exe);
}

TEST_P(OnEveryDevice, ACopyOutsideItsBuffersIsRefusedBeforeAnythingRuns) {
  std::vector<std::unique_ptr<Buffer>> keep;
  const TensorRef x = tensor(16, keep);
  EXPECT_THROW(dev().copy({CopyRegion{x.buffer, 0, x.buffer, 32, 64}}), BackendError);
  EXPECT_THROW(dev().copy({CopyRegion{nullptr, 0, x.buffer, 60, 8}}), BackendError);
  dev().sync();
}

INSTANTIATE_TEST_SUITE_P(Devices, OnEveryDevice, ::testing::ValuesIn(devices_under_test()),
                         [](const auto& info) { return device_test_name(info.param); });

}  // namespace
}  // namespace kiln::test
