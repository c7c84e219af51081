#!/usr/bin/python3
"""tools/trainer/speed_vs_torch.py's FLOP count and BLAS checks, without timing anything.

  speed_vs_torch_test.py PATH/TO/tools/trainer     (ctest: speed_vs_torch_test)

A wrong FLOP count fails here: the figures are worked by hand from the formula the script names
(PaLM's 6N + 12 L H Q T, N every parameter but the position embeddings), and N is checked against
the PyTorch model the script times.
"""
import os
import sys
import unittest

sys.path.insert(0, sys.argv.pop(1) if len(sys.argv) > 1 else
                os.path.join(os.path.dirname(__file__), "../../../tools/trainer"))
import speed_vs_torch as svt  # noqa: E402


class FlopCount(unittest.TestCase):
    def test_worked_by_hand(self):
        # 4 x 256, T 128: blocks 4 (12·256² + 13·256) = 3159040, wte 256·256 = 65536, ln_f 512:
        # N = 3225088; 6N = 19350528; attention 12·4·4·64·128 = 1572864.
        self.assertEqual(svt.flops_per_token(4, 256, 4, 128), 19350528 + 1572864)
        # 6 x 384, T 256: blocks 6 (12·384² + 13·384) = 10646784, wte 98304, ln_f 768:
        # N = 10745856; 6N = 64475136; attention 12·6·6·64·256 = 7077888.
        self.assertEqual(svt.flops_per_token(6, 384, 6, 256), 64475136 + 7077888)

    def test_parameters_are_the_timed_models(self):
        for name, (layers, c, heads, t) in svt.SHAPES.items():
            with self.subTest(shape=name):
                model = svt.Gpt2(layers, c, heads, t)
                total = sum(p.numel() for p in model.parameters())
                self.assertEqual(svt.gpt2_parameters(layers, c, t), total)
                n = total - model.wpe.weight.numel()
                self.assertEqual(svt.flops_per_token(layers, c, heads, t), 6 * n + 12 * layers * c * t)

    def test_attention_is_the_full_square(self):
        # Doubling T adds 12 L C T per token for attention: the whole T x T, not the causal half.
        layers, c, heads = 2, 64, 4
        grow = svt.flops_per_token(layers, c, heads, 256) - svt.flops_per_token(layers, c, heads, 128)
        self.assertEqual(grow, 12 * layers * c * 128)

    def test_the_formula_is_named(self):
        self.assertIn("6N + 12·L·H·Q·T", svt.FLOP_FORMULA)
        self.assertIn("PaLM", svt.FLOP_FORMULA)


class BlasChecks(unittest.TestCase):
    AVX512 = {"avx2", "avx512f"}

    def test_reference_blas_is_refused(self):
        msg = svt.blas_problem("PyTorch", "/usr/lib/x86_64-linux-gnu/blas/libblas.so.3", None, self.AVX512)
        self.assertIn("not OpenBLAS", msg)
        self.assertIn("update-alternatives", msg)

    def test_a_fallback_core_is_refused_where_the_cpu_has_better(self):
        msg = svt.blas_problem("zrt-train", "libopenblas.so.0", "Prescott", self.AVX512)
        self.assertIn("Prescott", msg)
        self.assertIn("SkylakeX", msg)
        self.assertIn("Haswell", svt.blas_problem("PyTorch", "x", "Nehalem", {"avx2"}))

    def test_the_cpus_own_kernels_pass(self):
        for core in ("SkylakeX", "Cooperlake", "Haswell", "Zen", "SapphireRapids"):
            self.assertIsNone(svt.blas_problem("PyTorch", "x", core, self.AVX512))
        # Without AVX2 there is nothing better to ask for.
        self.assertIsNone(svt.blas_problem("PyTorch", "x", "Prescott", {"sse3"}))

    def test_banner(self):
        out = ("zrt-train: GPT-2 4 layers x 256 wide, 4 heads, T 128, vocab 256: 3.258M parameters, "
               "2.01e+07 model FLOPs per token\nOpenBLAS: SkylakeX kernels (it chose Prescott for this "
               "CPU, which it does not know; zrt-train ran again with OPENBLAS_CORETYPE=SkylakeX)\n")
        self.assertEqual(svt.parse_banner(out), (3.258e6, 2.01e7, "SkylakeX"))


if __name__ == "__main__":
    unittest.main(verbosity=2)
