// tide._C: the Python binding's module. The runtime's classes bind here.
#include <nanobind/nanobind.h>

#include "runtime_binding.hpp"

NB_MODULE(_C, module) {
  module.doc() = "TIDE's native module: the runtime's communicator, bound for tide.fsdp";
  module.attr("__version__") = TIDE_VERSION;
  tide::python::bind_runtime(module);
}
