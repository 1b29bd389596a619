//! The Markov model of a mail reader (USITS'03 4.1: "a simple Markovian model of user
//! behavior derived from traces of the UC Berkeley Computer Science Division's IMAP
//! server"). The trace and its model were never published; this table is ours, in
//! its spirit: a session logs in, lists its one folder, reads messages in a row,
//! deletes or refiles some, rarely searches (under 1% of requests, as the paper
//! says of its search requests) and sometimes writes, and ends by logging out.
//!
//! The state is the last request type; the next type is drawn from the state's row.
//!
//! | from \ to | login | logout | folders | list | show | delete | move | search | compose |
//! |---|---|---|---|---|---|---|---|---|---|
//! | login   | 0 | 0 | .30 | .70 | 0 | 0 | 0 | 0 | 0 |
//! | logout  | 1 | 0 | 0 | 0 | 0 | 0 | 0 | 0 | 0 |
//! | folders | 0 | .04 | 0 | .92 | 0 | 0 | 0 | .02 | .02 |
//! | list    | 0 | .02 | .06 | .10 | .78 | 0 | 0 | .01 | .03 |
//! | show    | 0 | .01 | .02 | .22 | .50 | .15 | .07 | .005 | .025 |
//! | delete  | 0 | 0 | .05 | .45 | .50 | 0 | 0 | 0 | 0 |
//! | move    | 0 | 0 | .05 | .45 | .50 | 0 | 0 | 0 | 0 |
//! | search  | 0 | 0 | 0 | .40 | .60 | 0 | 0 | 0 | 0 |
//! | compose | 0 | .10 | .30 | .60 | 0 | 0 | 0 | 0 | 0 |
//!
//! Its stationary mix ([`MarkovModel::stationary`]): show ~49%, list ~28%, delete
//! ~7%, folders ~5%, move ~3.4%, compose ~2.5%, logout ~1.5%, login ~1.5%, search
//! ~0.9%. Choices within a step (which page, sort key, message, search word,
//! recipient) are described in [`super::user`].

use super::request::RequestType;
use crate::error::LoadError;

/// Number of request types (states).
pub const STATES: usize = RequestType::ALL.len();

/// The transition table of the module docs; rows and columns in
/// [`RequestType::ALL`] order.
pub const PAPER_TABLE: [[f64; STATES]; STATES] = [
    // login logout folders list show delete move search compose
    [0.0, 0.0, 0.30, 0.70, 0.0, 0.0, 0.0, 0.0, 0.0],
    [1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
    [0.0, 0.04, 0.0, 0.92, 0.0, 0.0, 0.0, 0.02, 0.02],
    [0.0, 0.02, 0.06, 0.10, 0.78, 0.0, 0.0, 0.01, 0.03],
    [0.0, 0.01, 0.02, 0.22, 0.50, 0.15, 0.07, 0.005, 0.025],
    [0.0, 0.0, 0.05, 0.45, 0.50, 0.0, 0.0, 0.0, 0.0],
    [0.0, 0.0, 0.05, 0.45, 0.50, 0.0, 0.0, 0.0, 0.0],
    [0.0, 0.0, 0.0, 0.40, 0.60, 0.0, 0.0, 0.0, 0.0],
    [0.0, 0.10, 0.30, 0.60, 0.0, 0.0, 0.0, 0.0, 0.0],
];

/// A Markov model over request types.
#[derive(Clone, Debug, PartialEq)]
pub struct MarkovModel {
    table: [[f64; STATES]; STATES],
}

impl Default for MarkovModel {
    fn default() -> Self {
        MarkovModel::new(PAPER_TABLE).expect("the built-in table is valid")
    }
}

fn index(t: RequestType) -> usize {
    RequestType::ALL
        .iter()
        .position(|x| *x == t)
        .expect("every type is in ALL")
}

impl MarkovModel {
    /// A model from a table; each row must be non-negative and sum to 1 (within 1e-9).
    pub fn new(table: [[f64; STATES]; STATES]) -> Result<MarkovModel, LoadError> {
        for (i, row) in table.iter().enumerate() {
            let sum: f64 = row.iter().sum();
            if row.iter().any(|p| !p.is_finite() || *p < 0.0) || (sum - 1.0).abs() > 1e-9 {
                return Err(LoadError::parse(format!(
                    "row {} of the transition table must be probabilities summing to 1 (sum {sum})",
                    RequestType::ALL[i]
                )));
            }
        }
        Ok(MarkovModel { table })
    }

    /// Probability of `to` right after `from`.
    pub fn p(&self, from: RequestType, to: RequestType) -> f64 {
        self.table[index(from)][index(to)]
    }

    /// The next request type after `from`, drawn with `rng`.
    pub fn next(&self, from: RequestType, rng: &mut fastrand::Rng) -> RequestType {
        let row = &self.table[index(from)];
        let mut u = rng.f64();
        for (i, p) in row.iter().enumerate() {
            if u < *p {
                return RequestType::ALL[i];
            }
            u -= p;
        }
        // Rounding left a sliver: the last type with any probability.
        let last = row.iter().rposition(|p| *p > 0.0).unwrap_or(0);
        RequestType::ALL[last]
    }

    /// The stationary distribution (share of each type in a long run), by power
    /// iteration.
    pub fn stationary(&self) -> [f64; STATES] {
        let mut pi = [1.0 / STATES as f64; STATES];
        for _ in 0..10_000 {
            let mut next = [0.0; STATES];
            for (i, row) in self.table.iter().enumerate() {
                for (j, p) in row.iter().enumerate() {
                    next[j] += pi[i] * p;
                }
            }
            // Averaging with the previous vector damps periodic chains.
            for j in 0..STATES {
                next[j] = 0.5 * next[j] + 0.5 * pi[j];
            }
            pi = next;
        }
        pi
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sampled_transitions_honour_the_table() {
        let m = MarkovModel::default();
        let mut rng = fastrand::Rng::with_seed(11);
        let mut counts = [[0u64; STATES]; STATES];
        let mut from = RequestType::Login;
        for _ in 0..400_000 {
            let to = m.next(from, &mut rng);
            counts[index(from)][index(to)] += 1;
            from = to;
        }
        for (i, row) in counts.iter().enumerate() {
            let n: u64 = row.iter().sum();
            assert!(n > 1000, "state {} visited {n} times", RequestType::ALL[i]);
            for (j, c) in row.iter().enumerate() {
                let p = PAPER_TABLE[i][j];
                let f = *c as f64 / n as f64;
                // Three standard deviations of a binomial share, at least 0.002.
                let tol = (3.0 * (p * (1.0 - p) / n as f64).sqrt()).max(0.002);
                assert!(
                    (f - p).abs() <= tol,
                    "{} -> {}: {f:.4} vs {p} (n {n})",
                    RequestType::ALL[i],
                    RequestType::ALL[j]
                );
                if p == 0.0 {
                    assert_eq!(*c, 0, "an impossible transition happened");
                }
            }
        }
    }

    #[test]
    fn the_mix_reads_mostly_and_searches_rarely() {
        let pi = MarkovModel::default().stationary();
        assert!((pi.iter().sum::<f64>() - 1.0).abs() < 1e-9);
        let share = |t| pi[index(t)];
        assert!(
            share(RequestType::Search) < 0.01,
            "search {}",
            share(RequestType::Search)
        );
        assert!(share(RequestType::Show) > 0.4 && share(RequestType::List) > 0.2);
        assert!((share(RequestType::Login) - share(RequestType::Logout)).abs() < 1e-9);
    }

    #[test]
    fn bad_tables_are_refused() {
        let mut t = PAPER_TABLE;
        t[3][4] += 0.1;
        assert!(
            MarkovModel::new(t)
                .unwrap_err()
                .to_string()
                .contains("list")
        );
        let mut t = PAPER_TABLE;
        t[1] = [-1.0, 2.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0];
        assert!(MarkovModel::new(t).is_err());
    }
}
