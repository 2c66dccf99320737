//! Pure law: every threshold, formula and decision of the engines, as plain
//! functions over plain values. No runtime, process, clock, file or
//! environment access: time and readings come in as arguments, decisions go
//! out as small enums the actors carry out. Each module is table-tested.
//!
//! | module | decides |
//! |---|---|
//! | `kv` | KV bytes per token; what a child really allocates |
//! | `plan` | a spawn's window and placement from the readings, the facts, the cap and the pin |
//! | `window` | the CPU and CUDA windows, footprints, the post-load check, working window, `kv_bound` |
//! | `caps` | the 256-token grid, the 4096 floor, padded comparisons |
//! | `brake` | the memory brake (`llama_step`), episodes, carries |
//! | `mlx` | the MLX memory ceiling and bound, and `mlx_step` |
//! | `pressure` | the Linux pressure level and paging evidence |
//! | `reap` | the idle reap |
//! | `residents` | several models at once: admission beside the others, eviction, one brake over all |
//! | `schedule` | which model goes next when not all fit: collation, the starvation limit, pins, weights, minimum residency |
//! | `keep_alive` | a request's keep-alive, parsed, and the idle timeout in force |
//! | `kv_save` | when a slot is saved, whether a save fits, the store's cap and eviction |
//! | `civil` | Unix time as a UTC calendar date (the warden's own timestamps) |
//! | `conversation` | a conversation's identity and every stable name (FNV-1a, pinned) |
//! | `kv_keep` | whether a model's saved KV can be used again, `--swa-full`, whether a restore was used |
//! | `route` | which routes an engine serves, which generate, and how each dialect's stream ends |
//! | `request` | what a request body may hold, field by field, and every generation's token bound |
//! | `request_routes` | what the body of each route beside chat must hold (completions, infill, tokenizer, embeddings, rerank), row by row |
//! | `request_chat` | what a request needs of its model (media parts, an infill's tokens) and what a model can take |
//! | `compact` | which idle conversations leave the shared KV pool for the store while others decode |
//! | `compact_meter` | the rates `compact` weighs, as the child shows them (decode per attended cell, the store's rates, answers) |
//! | `slots` | how many slots a child runs, which one a turn takes, whether it may start beside the others (the shared KV pool) |
//! | `crash` | crash classification from the child's output tail |
//! | `resume` | whether a turn whose child died goes on on the next child: run again, continued, or why not |
//! | `splice` | what a client was sent, the request that continues it, and the joint of the two streams |
//! | `upstream` | whether a refusal of the child's was the request's fault (a 400) or the server's |
//! | `cuda` | the GPU choice, spawn matrix, OOM retry, placement, Flash Attention, device check, spill, pre-flight |
//! | `quant` | which GGUF of a directory is the model |
//! | `select` | which engine runs |
//! | `header` | whether an unreadable model header fails the load |
//! | `prefix` | who owns the MLX prefix cache, and what a claim must reset |
//! | `split` | the window and layer split over RPC worker devices |
//! | `types` | the plain types the law shares with the layers above (engine kind and preference, the RAM total) |
//! | `worker_status` | a worker's status as read and carried on the wire |
//! | `workers` | a worker's build, when it is lost, its devices' limits, its pressure in the brake |

pub mod brake;
pub mod caps;
pub mod civil;
pub mod compact;
pub mod compact_meter;
pub mod conversation;
pub mod crash;
pub mod cuda;
pub mod header;
pub mod keep_alive;
pub mod kv;
pub mod kv_keep;
pub mod kv_save;
pub mod mlx;
#[cfg(test)]
pub mod mutant;

/// Whether the simulator broke rule `$m` (a `mutant::Mutant`) on purpose:
/// the one switch every rule it breaks is read through, `false` in every
/// build but the tests' (where `law::mutant` lives).
macro_rules! broken {
    ($m:ident) => {{
        #[cfg(test)]
        {
            $crate::law::mutant::is($crate::law::mutant::Mutant::$m)
        }
        #[cfg(not(test))]
        {
            false
        }
    }};
}
pub(crate) use broken;
pub mod names;
pub mod plan;
pub mod prefix;
// Linux's pressure law (PSI and MemAvailable): read only by the Linux
// provider, still compiled and table-tested everywhere.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
pub mod pressure;
pub mod quant;
pub mod reap;
pub mod request;
pub mod request_chat;
pub mod slots;
pub mod request_routes;
pub mod residents;
pub mod resume;
pub mod route;
pub mod schedule;
pub mod select;
pub mod splice;
pub mod split;
pub mod types;
pub mod upstream;
pub mod window;
pub mod worker_status;
pub mod workers;
