"""mkc._capi mirrors runtime/include/mkc.h: every function with its C types, every struct field
in order, the statuses and constants. Read from the header itself, so that a declaration changed
there and not in Python fails here rather than corrupting memory. Needs no library."""

import ctypes
import re
import unittest

import support  # noqa: F401 (puts mkc on the path)
from mkc import _capi

HEADER = re.sub(r"/\*.*?\*/|//[^\n]*", "", support.HEADER.read_text(), flags=re.S)

_runtime_p = ctypes.POINTER(_capi.mkc_runtime)
_op_p = ctypes.POINTER(_capi.mkc_op)
# The ctypes type of each C type mkc.h uses. char ** is an out-string freed with mkc_free, which
# ctypes must not convert (c_void_p); const char ** one it lends (c_char_p).
C_TYPES = {
    "void": None,
    "int": ctypes.c_int,
    "size_t": ctypes.c_size_t,
    "long long": ctypes.c_longlong,
    "unsigned long long": ctypes.c_ulonglong,
    "char": ctypes.c_char,
    "mkc_status": _capi.mkc_status,
    "const char *": ctypes.c_char_p,
    "void *": ctypes.c_void_p,
    "char **": ctypes.POINTER(ctypes.c_void_p),
    "const char **": ctypes.POINTER(ctypes.c_char_p),
    "void *const *": ctypes.POINTER(ctypes.c_void_p),
    "void **": ctypes.POINTER(ctypes.c_void_p),
    "int *": ctypes.POINTER(ctypes.c_int),
    "const int *": ctypes.POINTER(ctypes.c_int),
    "unsigned *": ctypes.POINTER(ctypes.c_uint),
    "unsigned long long *": ctypes.POINTER(ctypes.c_ulonglong),
    "mkc_runtime *": _runtime_p,
    "const mkc_runtime *": _runtime_p,
    "mkc_runtime **": ctypes.POINTER(_runtime_p),
    "mkc_op *": _op_p,
    "const mkc_op *": _op_p,
    "mkc_op **": ctypes.POINTER(_op_p),
    "mkc_runtime_options *": ctypes.POINTER(_capi.mkc_runtime_options),
    "const mkc_runtime_options *": ctypes.POINTER(_capi.mkc_runtime_options),
    "mkc_runtime_info *": ctypes.POINTER(_capi.mkc_runtime_info),
    "mkc_network_statistics *": ctypes.POINTER(_capi.mkc_network_statistics),
    "mkc_argument *": ctypes.POINTER(_capi.mkc_argument),
}


def c_type(declaration):
    """The type of a declaration without its name ("const char *text" -> "const char *")."""
    declaration = " ".join(declaration.split())
    if declaration == "void":
        return "void"
    name = re.search(r"\w+$", declaration).group()
    type_ = declaration[:-len(name)].strip()
    return re.sub(r"\s*\*", " *", type_).replace("* *", "**").replace("* const", "*const")


def header_functions():
    """{name: (return type, [parameter types])} of every function mkc.h declares."""
    functions = {}
    for match in re.finditer(r"([\w\s\*]+?)\b(mkc_\w+)\s*\(([^)]*)\)\s*;", HEADER):
        returns = re.sub(r"\s*\*", " *", " ".join(match.group(1).split()))
        parameters = [c_type(p) for p in match.group(3).split(",")]
        functions[match.group(2)] = (returns, [] if parameters == ["void"] else parameters)
    return functions


def header_struct(name):
    """[(field, C type, array length or None)] of the struct `name`, in order."""
    body = re.search(r"typedef struct %s \{(.*?)\}" % name, HEADER, re.S).group(1)
    fields = []
    for declaration in filter(None, (d.strip() for d in body.split(";"))):
        first, *others = declaration.split(",")  # "int rank, world_size"
        first, length = re.match(r"(.*?)\s*(?:\[(\w+)\])?$", first).groups()
        name = re.search(r"\w+$", first).group()
        for field in [name] + [other.strip() for other in others]:
            fields.append((field, c_type(first), length))
    return fields


def header_define(name):
    return int(re.search(r"#define %s (\d+)" % name, HEADER).group(1))


class HeaderMirror(unittest.TestCase):
    def test_every_function_has_its_prototype(self):
        functions = header_functions()
        self.assertGreater(len(functions), 15)
        self.assertEqual(sorted(functions), sorted(_capi.PROTOTYPES))
        for name, (returns, parameters) in functions.items():
            with self.subTest(function=name):
                restype, argtypes = _capi.PROTOTYPES[name]
                self.assertIs(restype, C_TYPES[returns])
                self.assertEqual(argtypes, [C_TYPES[p] for p in parameters])

    def test_structs_have_the_header_fields_in_order(self):
        for struct in (_capi.mkc_runtime_options, _capi.mkc_runtime_info,
                       _capi.mkc_network_statistics, _capi.mkc_argument):
            with self.subTest(struct=struct.__name__):
                fields = header_struct(struct.__name__)
                self.assertEqual([name for name, _ in struct._fields_],
                                 [name for name, _, _ in fields])
                for (_, ctype), (name, type_, length) in zip(struct._fields_, fields):
                    if length is None:
                        self.assertIs(ctype, C_TYPES[type_], name)
                    else:
                        self.assertIs(ctype._type_, C_TYPES[type_], name)
                        self.assertEqual(ctype._length_, int(length) if length.isdigit()
                                         else header_define(length), name)

    def test_statuses_and_constants(self):
        enum = re.search(r"typedef enum mkc_status \{(.*?)\}", HEADER, re.S).group(1)
        statuses = re.findall(r"(MKC_\w+) = (\d+)", enum)
        self.assertEqual([name for name, _ in statuses], list(_capi.STATUS_NAMES))
        self.assertEqual([int(value) for _, value in statuses],
                         list(range(len(_capi.STATUS_NAMES))))
        self.assertEqual(header_define("MKC_API_VERSION"), _capi.MKC_API_VERSION)
        self.assertEqual(header_define("MKC_MAX_RANK"), _capi.MKC_MAX_RANK)

    def test_the_parser_sees_a_changed_declaration(self):
        # The checks above are only as good as the parsing: a parameter added to a prototype, or
        # a field's type changed, must show.
        self.assertEqual(c_type("void *const *arguments"), "void *const *")
        self.assertEqual(c_type("const mkc_runtime *runtime"), "const mkc_runtime *")
        self.assertEqual(header_functions()["mkc_op_launch"][1],
                         ["const mkc_op *", "void *", "void *const *", "int"])
        self.assertEqual(header_struct("mkc_runtime_info")[0], ("rank", "int", None))
        self.assertEqual(header_struct("mkc_argument")[2], ("extents", "long long",
                                                           "MKC_MAX_RANK"))


if __name__ == "__main__":
    unittest.main()
