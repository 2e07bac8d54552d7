"""Element names: what mkc.Runtime.empty and the argument checks accept as a dtype."""

import unittest

from support import FakeDtype
from mkc import _dtypes


class ElementOf(unittest.TestCase):
    def test_short_and_long_names(self):
        for names, element in ((("bf16", "bfloat16", "BF16"), "bf16"),
                               (("f16", "float16"), "f16"),
                               (("f32", "float32"), "f32"),
                               (("i32", "int32"), "i32")):
            for name in names:
                self.assertEqual(_dtypes.element_of(name), element, name)

    def test_torch_dtypes_by_name(self):
        self.assertEqual(_dtypes.element_of(FakeDtype("bfloat16")), "bf16")
        self.assertEqual(_dtypes.element_of(FakeDtype("float16")), "f16")
        self.assertEqual(_dtypes.element_of(FakeDtype("float32")), "f32")
        self.assertEqual(_dtypes.element_of(FakeDtype("int32")), "i32")

    def test_elements_mkc_lacks(self):
        with self.assertRaisesRegex(ValueError, r"'float64' is not an element mkc has: bf16, f16"):
            _dtypes.element_of("float64")
        with self.assertRaisesRegex(ValueError, r"torch.int64 is not an element mkc has"):
            _dtypes.element_of(FakeDtype("int64"))

    def test_not_a_dtype(self):
        with self.assertRaisesRegex(TypeError, r"dtype must be a string .* not int"):
            _dtypes.element_of(4)

    def test_torch_element_of_a_tensor(self):
        self.assertEqual(_dtypes.torch_element(FakeDtype("bfloat16")), "bf16")
        self.assertIsNone(_dtypes.torch_element(FakeDtype("float64")))

    def test_typestrs(self):
        for typestr in ("<i2", "<u2", "<V2", "|V2"):
            self.assertTrue(_dtypes.typestr_holds(typestr, "bf16"), typestr)
            self.assertFalse(_dtypes.typestr_holds(typestr, "f16"), typestr)
        self.assertTrue(_dtypes.typestr_holds("<f2", "f16"))
        self.assertFalse(_dtypes.typestr_holds("<f2", "bf16"))
        self.assertTrue(_dtypes.typestr_holds("<f4", "f32"))
        self.assertTrue(_dtypes.typestr_holds("<i4", "i32"))
        self.assertFalse(_dtypes.typestr_holds(">f4", "f32"))  # big-endian
        for element, typestr in _dtypes.TYPESTRS.items():
            self.assertTrue(_dtypes.typestr_holds(typestr, element), element)


if __name__ == "__main__":
    unittest.main()
