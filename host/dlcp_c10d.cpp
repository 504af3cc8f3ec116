// The dlcp backend's C++ face: a c10d::Backend that PyTorch wraps in a real ProcessGroup.
//
// Why C++ at all: PyTorch dispatches collectives (its dispatcher ops, functional collectives, DTensor, FSDP2) to
// the c10d::Backend registered on a ProcessGroup for the tensor's device, and c10d::Backend has no Python
// trampoline. This class is that trampoline, and nothing more: every operation calls the method of the same name
// on a Python object (host.backend.DlcpBackend) with the GIL held and wraps the Python work it returns in a
// c10d::Work (DlcpWork below) whose wait/is_completed/get_future call back into it. All the logic (rendezvous,
// transport, algorithms, ordering) stays in Python; see host/backend.py and docs/backend.md.
//
// Built on first use by host/backend_ext.py (torch.utils.cpp_extension.load), cached between runs.

#include <torch/extension.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/csrc/jit/python/pybind_utils.h>

#include <chrono>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace py = pybind11;

namespace {

// Drop a Python reference from C++ code that may run without the GIL (a Work or Backend released by a C++
// thread), or after the interpreter has gone (then the reference is leaked on purpose).
void release_py(py::object& obj) {
  if (!obj) {
    return;
  }
  if (!Py_IsInitialized()) {
    obj.release();
    return;
  }
  py::gil_scoped_acquire gil;
  obj = py::object();
}

// One operation of the backend: forwards c10d::Work's interface to the Python work object
// (host.backend.DlcpWork: wait(timeout_s), is_completed(), is_success(), exception(), source_rank(),
// result(), get_future(), abort(), lost_ranges).
class DlcpWork : public c10d::Work {
 public:
  DlcpWork(py::object obj, c10d::OpType type) : c10d::Work(-1, type), obj_(std::move(obj)) {}

  ~DlcpWork() override {
    release_py(obj_);
  }

  bool isCompleted() override {
    py::gil_scoped_acquire gil;
    return obj_.attr("is_completed")().cast<bool>();
  }

  bool isSuccess() const override {
    py::gil_scoped_acquire gil;
    return obj_.attr("is_success")().cast<bool>();
  }

  std::exception_ptr exception() const override {
    py::gil_scoped_acquire gil;
    py::object e = obj_.attr("exception")();
    if (e.is_none()) {
      return nullptr;
    }
    return std::make_exception_ptr(std::runtime_error(py::str(e).cast<std::string>()));
  }

  int sourceRank() const override {
    py::gil_scoped_acquire gil;
    return obj_.attr("source_rank")().cast<int>();
  }

  std::vector<at::Tensor> result() override {
    py::gil_scoped_acquire gil;
    return obj_.attr("result")().cast<std::vector<at::Tensor>>();
  }

  // Device tensors: the current stream waits for the copies back (the Python work's wait does it after
  // completion); host tensors: nothing to order.
  void synchronize() override {
    py::gil_scoped_acquire gil;
    obj_.attr("synchronize")();
  }

  // A Python error (TransportError, ...) travels as py::error_already_set and is restored as itself when this
  // returns to Python.
  bool wait(std::chrono::milliseconds timeout) override {
    py::gil_scoped_acquire gil;
    py::object secs = timeout.count() > 0 ? py::cast(timeout.count() / 1000.0) : py::none();
    return obj_.attr("wait")(secs).cast<bool>();
  }

  void abort() override {
    py::gil_scoped_acquire gil;
    obj_.attr("abort")();
  }

  // A future of the tensors as torch's own C++ code expects it (DDP's reducer reads the value without the GIL, so
  // it must be a TensorList, not the Python list the Python work's future holds): completed, with the GIL taken
  // only to unpack the Python list, when the Python work's future is. Made on first request (the GIL serialises
  // that), so point-to-point works that nobody asks a future of start no waiter. For CUDA tensors both futures
  // are CUDA-aware (made for the work's devices()): the Python one is completed with the side stream that copied
  // the results back current, its callbacks run on streams that wait for that, and this one records its own
  // events there, so its consumers (DDP's reducer) are ordered after the copies, as with gloo's CUDA works.
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
    py::gil_scoped_acquire gil;
    if (!fut_) {
      std::vector<c10::Device> devices;
      for (py::handle d : obj_.attr("devices")()) {
        devices.emplace_back(d.cast<std::string>());
      }
      fut_ = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()),
                                                      std::move(devices));
      auto pyfut = obj_.attr("get_future")().cast<std::shared_ptr<torch::jit::PythonFutureWrapper>>()->fut;
      auto out = fut_;
      pyfut->addCallback([out](c10::ivalue::Future& f) {
        if (f.hasError()) {
          out->setError(f.exception_ptr());
          return;
        }
        std::vector<at::Tensor> tensors;
        {
          // torch.futures.Future.set_exception stores the exception as the value (Python re-raises it on
          // value()): here it must become the C++ future's error.
          py::gil_scoped_acquire inner;
          py::handle v = f.value().toPyObject();
          if (PyExceptionInstance_Check(v.ptr())) {
            std::string what = py::str(py::type::handle_of(v).attr("__name__")).cast<std::string>() + ": " +
                py::str(v).cast<std::string>();
            out->setError(std::make_exception_ptr(std::runtime_error(what)));
            return;
          }
          tensors = f.value().toPyObjectHolder()->extractTensors();
        }
        out->markCompleted(c10::IValue(tensors));
      });
    }
    return fut_;
  }

  py::object py_work() const {
    return obj_;
  }

 private:
  py::object obj_;
  c10::intrusive_ptr<c10::ivalue::Future> fut_;  // see getFuture
};

// The backend: each c10d::Backend operation calls the Python method of the same name (the Python names of
// torch's ProcessGroup: allreduce, allgather, _allgather_base, ...) with the same arguments.
class DlcpBackend : public c10d::Backend {
 public:
  DlcpBackend(int rank, int size, py::object impl) : c10d::Backend(rank, size), impl_(std::move(impl)) {}

  ~DlcpBackend() override {
    release_py(impl_);
  }

  const std::string getBackendName() const override {
    return "dlcp";
  }

  bool supportsCoalescing() const override {
    return true;
  }

  py::object impl() const {
    return impl_;
  }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                          const c10d::BroadcastOptions& opts) override {
    return call("broadcast", c10d::OpType::BROADCAST, tensors, opts);
  }

  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                          const c10d::AllreduceOptions& opts) override {
    return call("allreduce", c10d::OpType::ALLREDUCE, tensors, opts);
  }

  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                    const c10d::AllreduceCoalescedOptions& opts) override {
    return call("allreduce_coalesced", c10d::OpType::ALLREDUCE_COALESCED, tensors, opts);
  }

  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                       const c10d::ReduceOptions& opts) override {
    return call("reduce", c10d::OpType::REDUCE, tensors, opts);
  }

  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllgatherOptions& opts) override {
    return call("allgather", c10d::OpType::ALLGATHER, outputs, inputs, opts);
  }

  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                const c10d::AllgatherOptions& opts) override {
    return call("_allgather_base", c10d::OpType::_ALLGATHER_BASE, output, input, opts);
  }

  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                    std::vector<at::Tensor>& inputs,
                                                    const c10d::AllgatherOptions& opts) override {
    return call("allgather_coalesced", c10d::OpType::ALLGATHER_COALESCED, outputs, inputs, opts);
  }

  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                std::vector<at::Tensor>& inputs,
                                                                const c10d::AllgatherOptions& opts) override {
    return call("allgather_into_tensor_coalesced", c10d::OpType::COALESCED, outputs, inputs, opts);
  }

  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                       std::vector<at::Tensor>& inputs,
                                       const c10d::GatherOptions& opts) override {
    return call("gather", c10d::OpType::GATHER, outputs, inputs, opts);
  }

  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                        std::vector<std::vector<at::Tensor>>& inputs,
                                        const c10d::ScatterOptions& opts) override {
    return call("scatter", c10d::OpType::SCATTER, outputs, inputs, opts);
  }

  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                               std::vector<std::vector<at::Tensor>>& inputs,
                                               const c10d::ReduceScatterOptions& opts) override {
    return call("reduce_scatter", c10d::OpType::REDUCE_SCATTER, outputs, inputs, opts);
  }

  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                     const c10d::ReduceScatterOptions& opts) override {
    return call("_reduce_scatter_base", c10d::OpType::_REDUCE_SCATTER_BASE, output, input, opts);
  }

  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                std::vector<at::Tensor>& inputs,
                                                                const c10d::ReduceScatterOptions& opts) override {
    return call("reduce_scatter_tensor_coalesced", c10d::OpType::COALESCED, outputs, inputs, opts);
  }

  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                              std::vector<int64_t>& output_splits,
                                              std::vector<int64_t>& input_splits,
                                              const c10d::AllToAllOptions& opts) override {
    return call("alltoall_base", c10d::OpType::ALLTOALL_BASE, output, input, output_splits, input_splits, opts);
  }

  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                         const c10d::AllToAllOptions& opts) override {
    return call("alltoall", c10d::OpType::ALLTOALL, outputs, inputs, opts);
  }

  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override {
    return call("barrier", c10d::OpType::BARRIER, opts);
  }

  void monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) override {
    py::gil_scoped_acquire gil;
    impl_.attr("monitored_barrier")(opts, wait_all_ranks);
  }

  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override {
    return call("send", c10d::OpType::SEND, tensors, dst, tag);
  }

  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override {
    return call("recv", c10d::OpType::RECV, tensors, src, tag);
  }

  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override {
    return call("recv_anysource", c10d::OpType::RECVANYSOURCE, tensors, tag);
  }

  void startCoalescing() override {
    py::gil_scoped_acquire gil;
    impl_.attr("start_coalescing")();
  }

  c10::intrusive_ptr<c10d::Work> endCoalescing() override {
    return call("end_coalescing", c10d::OpType::COALESCED);
  }

  void setSequenceNumberForGroup() override {}  // numbered from 0 at creation on every member

  uint64_t getSequenceNumberForGroup() override {
    py::gil_scoped_acquire gil;
    return impl_.attr("sequence_number")().cast<uint64_t>();
  }

  void setTimeout(std::chrono::milliseconds timeout) override {
    py::gil_scoped_acquire gil;
    impl_.attr("set_timeout")(timeout.count() / 1000.0);
  }

  void abort() override {
    py::gil_scoped_acquire gil;
    impl_.attr("abort")();
  }

  void shutdown() override {
    py::gil_scoped_acquire gil;
    impl_.attr("shutdown")();
  }

 private:
  template <typename... Args>
  c10::intrusive_ptr<c10d::Work> call(const char* name, c10d::OpType type, Args&&... args) {
    py::gil_scoped_acquire gil;
    py::object work = impl_.attr(name)(std::forward<Args>(args)...);
    return c10::make_intrusive<DlcpWork>(std::move(work), type);
  }

  py::object impl_;
};

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  py::module_::import("torch._C._distributed_c10d");  // the base classes' Python types
  m.doc() = "dlcp's c10d::Backend: forwards every operation to a Python host.backend.DlcpBackend";
  py::class_<DlcpBackend, c10d::Backend, c10::intrusive_ptr<DlcpBackend>>(m, "DlcpBackend")
      .def(py::init<int, int, py::object>(), py::arg("rank"), py::arg("size"), py::arg("impl"))
      .def_property_readonly("impl", &DlcpBackend::impl, "the Python half (host.backend.DlcpBackend)");
  py::class_<DlcpWork, c10d::Work, c10::intrusive_ptr<DlcpWork>>(m, "DlcpWork")
      .def_property_readonly("py_work", &DlcpWork::py_work, "the Python work (host.backend.DlcpWork)")
      .def_property_readonly(
          "lost_ranges", [](const DlcpWork& w) { return w.py_work().attr("lost_ranges"); },
          "element ranges [start, stop) that bounded loss zero-filled");
}
