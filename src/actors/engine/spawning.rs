//! A spawn's port retries, as an order with no I/O: llama-server binds its
//! port only once it runs, so another process can take a port the warden
//! found free in between (measured: a child that loses the race exits with
//! `port_in_use`). The child then gets the next free port, never one that
//! was taken already, `attempts` times at most; what ends the retries is
//! the last loss, said as the spawn's error. `spawn` carries it out (the
//! pick of a free port and the launch are its I/O).

/// What to do next.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Next<'a, E> {
    /// Launch on a free port that is none of these.
    Launch { skip: &'a [u16] },
    /// No attempt left: the last loss (`None`: none was tried).
    GiveUp(Option<E>),
}

/// A spawn's attempts so far.
#[derive(Debug)]
pub(crate) struct Spawning<E> {
    tried: Vec<u16>,
    attempts: usize,
    last: Option<E>,
}

impl<E> Spawning<E> {
    /// At most `attempts` launches.
    pub(crate) fn new(attempts: usize) -> Self {
        Self {
            tried: Vec::new(),
            attempts,
            last: None,
        }
    }

    /// The next launch, or the end of the retries.
    pub(crate) fn next(&mut self) -> Next<'_, E> {
        if self.tried.len() >= self.attempts {
            return Next::GiveUp(self.last.take());
        }
        Next::Launch { skip: &self.tried }
    }

    /// The child lost `port` to another process, with `why`.
    pub(crate) fn port_taken(&mut self, port: u16, why: E) {
        self.tried.push(port);
        self.last = Some(why);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each loss skips its port from then on; the attempts end with the
    /// last loss; no attempt at all gives up with nothing.
    #[test]
    fn losses_skip_their_ports_and_the_last_one_is_said() {
        let mut s = Spawning::new(3);
        assert_eq!(s.next(), Next::Launch { skip: &[] });
        s.port_taken(8080, "a");
        assert_eq!(s.next(), Next::Launch { skip: &[8080] });
        s.port_taken(8081, "b");
        assert_eq!(s.next(), Next::Launch { skip: &[8080, 8081] });
        s.port_taken(8083, "c");
        assert_eq!(s.next(), Next::GiveUp(Some("c")));
        let mut none: Spawning<&str> = Spawning::new(0);
        assert_eq!(none.next(), Next::GiveUp(None));
    }
}
