// zrt._zrt.adam_step: ZRT's CPU Adam/AdamW kernels (runtime/optim/adam.h: vectorised, threaded,
// PyTorch's operation order) on a torch tensor's memory, for zrt.ops.CPUAdam.
#include <pybind11/pybind11.h>

#include "core/error.h"
#include "python/bindings/buffers.h"
#include "python/bindings/module.h"
#include "runtime/optim/adam.h"

namespace py = pybind11;

namespace zrt::python {

void bindCpuAdam(py::module_& m) {
  m.def(
      "adam_step",
      [](const py::buffer& param, const py::buffer& expAvg, const py::buffer& expAvgSq, const py::buffer& grad,
         std::int64_t step, double lr, double beta1, double beta2, double eps, double weightDecay, bool adamw,
         bool biasCorrection, double gradScale, const py::object& paramCopy) {
        const BufferView p = viewOf(param, "adam_step: param", true);
        const BufferView m1 = viewOf(expAvg, "adam_step: exp_avg", true);
        const BufferView m2 = viewOf(expAvgSq, "adam_step: exp_avg_sq", true);
        const BufferView g = viewOf(grad, "adam_step: grad", false);
        if (p.dtype != DType::F32 || m1.dtype != DType::F32 || m2.dtype != DType::F32)
          ZRT_THROW(InvalidArgument, "adam_step: param, exp_avg and exp_avg_sq must be float32 (they are ",
                    nameOf(p.dtype), ", ", nameOf(m1.dtype), ", ", nameOf(m2.dtype), ")");
        if (m1.numel != p.numel || m2.numel != p.numel || g.numel != p.numel)
          ZRT_THROW(InvalidArgument, "adam_step: sizes differ: param ", p.numel, ", exp_avg ", m1.numel,
                    ", exp_avg_sq ", m2.numel, ", grad ", g.numel);
        optim::AdamState s;
        s.param = static_cast<float*>(p.data);
        s.expAvg = static_cast<float*>(m1.data);
        s.expAvgSq = static_cast<float*>(m2.data);
        s.grad = g.data;
        s.gradType = g.dtype;
        s.size = p.numel;
        if (!paramCopy.is_none()) {
          const BufferView c = viewOf(paramCopy.cast<py::buffer>(), "adam_step: param_copy", true);
          if (c.numel != p.numel)
            ZRT_THROW(InvalidArgument, "adam_step: param_copy has ", c.numel, " elements, param ", p.numel);
          s.paramCopy = c.data;
          s.copyType = c.dtype;
        }
        optim::AdamHyper h;
        h.lr = lr;
        h.beta1 = beta1;
        h.beta2 = beta2;
        h.eps = eps;
        h.weightDecay = weightDecay;
        h.decoupledWeightDecay = adamw;
        h.biasCorrection = biasCorrection;
        h.step = step;
        h.gradScale = gradScale;
        // The kernels' own threads do the work; other Python threads may run meanwhile.
        py::gil_scoped_release unlocked;
        optim::adamStep(h, s);
      },
      py::arg("param"), py::arg("exp_avg"), py::arg("exp_avg_sq"), py::arg("grad"), py::arg("step"),
      py::arg("lr"), py::arg("beta1"), py::arg("beta2"), py::arg("eps"), py::arg("weight_decay"),
      py::arg("adamw"), py::arg("bias_correction"), py::arg("grad_scale") = 1.0,
      py::arg("param_copy") = py::none(),
      "One Adam (adamw=False: L2 decay in the gradient) or AdamW step, in place, on float32 "
      "param/exp_avg/exp_avg_sq; grad is float32, float16 or bf16 bits (int16). param_copy, when "
      "given, receives the updated parameter in its own dtype.");
}

}  // namespace zrt::python
