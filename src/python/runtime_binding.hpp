// The runtime's classes in the Python module (runtime_binding.cpp).
#pragma once

#include <nanobind/nanobind.h>

namespace tide::python {

void bind_runtime(nanobind::module_& module);

}  // namespace tide::python
