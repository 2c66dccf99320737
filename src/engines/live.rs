//! What each engine keeps about its live child, beside what every child has
//! (process, client, plan, port, window): the engine's own per-child state,
//! one type per engine in its home. The core holds it whole and asks it only
//! engine-neutral questions (is the brake off for this child, what bound does
//! it enforce); each engine's hooks reach their own part.

use crate::engines::cpu::CpuChild;
use crate::engines::cpu::rpc::Given;
use crate::engines::cuda::CudaChild;
use crate::engines::mlx::MlxChild;
use crate::law::cuda::Offload;
use crate::status::EngineKind;

/// A live child's engine state.
#[derive(Debug)]
pub enum ChildState {
    /// CPU llama-server.
    Cpu(CpuChild),
    /// CUDA llama-server.
    Cuda(CudaChild),
    /// mlx_vlm.server.
    Mlx(MlxChild),
}

impl ChildState {
    /// A new child's state on `kind`'s engine.
    pub fn new(kind: EngineKind) -> Self {
        match kind {
            EngineKind::Cpu => Self::Cpu(CpuChild::default()),
            EngineKind::Cuda => Self::Cuda(CudaChild::default()),
            EngineKind::Mlx => Self::Mlx(MlxChild::default()),
        }
    }

    /// The CPU engine's part.
    pub fn cpu_mut(&mut self) -> Option<&mut CpuChild> {
        match self {
            Self::Cpu(c) => Some(c),
            _ => None,
        }
    }

    /// The CUDA engine's part.
    pub fn cuda(&self) -> Option<&CudaChild> {
        match self {
            Self::Cuda(c) => Some(c),
            _ => None,
        }
    }

    /// The CUDA engine's part, to write.
    pub fn cuda_mut(&mut self) -> Option<&mut CudaChild> {
        match self {
            Self::Cuda(c) => Some(c),
            _ => None,
        }
    }

    /// The MLX engine's part.
    pub fn mlx(&self) -> Option<&MlxChild> {
        match self {
            Self::Mlx(c) => Some(c),
            _ => None,
        }
    }

    /// The MLX engine's part, to write.
    pub fn mlx_mut(&mut self) -> Option<&mut MlxChild> {
        match self {
            Self::Mlx(c) => Some(c),
            _ => None,
        }
    }

    /// Why the brake never samples this child (CUDA: partial, unsized).
    pub fn brake_off(&self) -> Option<&str> {
        self.cuda().and_then(|c| c.brake_off.as_deref())
    }

    /// The window bound the child itself enforces (MLX), when memory bounds it.
    pub fn memory_bound(&self) -> Option<u32> {
        self.mlx().and_then(|m| m.memory_bound)
    }

    /// The child's footprint right after its load (MLX).
    pub fn base_bytes(&self) -> Option<u64> {
        self.mlx().and_then(|m| m.base_bytes)
    }

    /// What fit did with the layers (CUDA).
    pub fn offload(&self) -> Option<Offload> {
        self.cuda().and_then(|c| c.offload)
    }

    /// Over RPC workers: what each device was given (CPU).
    pub fn given(&self) -> &[Given] {
        match self {
            Self::Cpu(c) => &c.given,
            _ => &[],
        }
    }
}
