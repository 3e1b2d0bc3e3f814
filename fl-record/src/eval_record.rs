//! `EvalRecord`: one evaluation of the global model, one row of `metrics.csv`.

/// One evaluation of the global model. Every field is a deterministic function of the
/// configuration and seed (host timings are reported separately).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct EvalRecord {
    /// Virtual time of the evaluation, seconds.
    pub virtual_time_s: f64,
    /// Global model version evaluated (the number of aggregations so far).
    pub version: u64,
    /// Client updates aggregated so far.
    pub updates: u64,
    /// Top-1 accuracy on the test set, in [0, 1] (NaN when this evaluation skipped the test
    /// set, see `[eval] test_every`).
    pub accuracy: f64,
    /// Mean cross-entropy on the test set (NaN when the test set was skipped).
    pub loss: f64,
    /// Top-5 accuracy on the test set (the label among the five largest logits; with five
    /// classes or fewer, 1), NaN when the test set was skipped or the record predates it.
    #[serde(default = "nan")]
    pub top5: f64,
    /// Macro-averaged F1 on the test set: the mean over the classes that occur as a label or
    /// a prediction of `2·TP / (2·TP + FP + FN)` (scikit-learn's `f1_score(average="macro")`);
    /// NaN when skipped or older.
    #[serde(default = "nan")]
    pub macro_f1: f64,
    /// Co-S²P's resource utilisation (Eq. 17) over the aggregations since the previous
    /// evaluation: the mean, per aggregation, of `Σ_n T_n / (N · max_n T_n)` over its `N`
    /// updates, `T_n` the virtual seconds from a job's dispatch to its arrival (training and
    /// transfers); NaN without aggregations or in older records.
    #[serde(default = "nan")]
    pub resource_utilization: f64,
    /// Top-1 accuracy of the clients' personalised models, each on its own held-out split
    /// (`[eval] client_test_share`), weighted by the clients' data sizes; NaN without splits.
    #[serde(default = "nan")]
    pub client_accuracy: f64,
    /// Their top-5 accuracy, weighted the same way.
    #[serde(default = "nan")]
    pub client_top5: f64,
    /// Their macro-F1 (each client's over its own split), weighted the same way.
    #[serde(default = "nan")]
    pub client_macro_f1: f64,
    /// Mean local training loss of the updates aggregated since the previous evaluation (NaN
    /// if there were none).
    pub train_loss: f64,
    /// Mean staleness, in versions, of those updates (NaN if there were none).
    pub mean_staleness: f64,
    /// Largest staleness, in versions, of those updates (0 if there were none).
    pub max_staleness: u64,
    /// Bytes uploaded by clients so far (updates of arrived jobs, and split-learning relay).
    pub bytes_up: f64,
    /// Bytes downloaded by clients so far (models of dispatched jobs, mid-training pulls, and
    /// split-learning relay).
    pub bytes_down: f64,
    /// Client updates rejected so far because they held NaN or infinite values.
    pub rejected_updates: u64,
}

/// What a record written before a score existed reads for it.
fn nan() -> f64 {
    f64::NAN
}

impl EvalRecord {
    /// The header line of the metrics CSV, the fields in declaration order.
    pub const CSV_HEADER: &'static str = "virtual_time_s,version,updates,accuracy,loss,train_loss,mean_staleness,max_staleness,bytes_up,bytes_down,rejected_updates,top5,macro_f1,resource_utilization,client_accuracy,client_top5,client_macro_f1";

    /// The record as one CSV line (no newline), in [`EvalRecord::CSV_HEADER`]'s order.
    pub fn csv_row(&self) -> String {
        format!(
            "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
            self.virtual_time_s,
            self.version,
            self.updates,
            self.accuracy,
            self.loss,
            self.train_loss,
            self.mean_staleness,
            self.max_staleness,
            self.bytes_up,
            self.bytes_down,
            self.rejected_updates,
            self.top5,
            self.macro_f1,
            self.resource_utilization,
            self.client_accuracy,
            self.client_top5,
            self.client_macro_f1
        )
    }

    /// Reads a metrics CSV: columns by their header names, in any order; a column the file
    /// lacks (an older record) reads as NaN, or 0 for counts. `virtual_time_s`, `version`,
    /// `accuracy` and `loss` are required. Errors name the line and the column.
    pub fn read_csv(text: &str) -> Result<Vec<EvalRecord>, String> {
        let mut lines = text.lines();
        let header: Vec<&str> = lines.next().unwrap_or_default().split(',').collect();
        let column = |name: &str| header.iter().position(|h| *h == name);
        let required = |name: &str| column(name).ok_or_else(|| format!("no `{name}` column"));
        let (time, version, accuracy, loss) =
            (required("virtual_time_s")?, required("version")?, required("accuracy")?, required("loss")?);
        let optional = |name: &str| column(name);
        let (top5, macro_f1, utilization) = (optional("top5"), optional("macro_f1"), optional("resource_utilization"));
        let (client_accuracy, client_top5, client_macro_f1) =
            (optional("client_accuracy"), optional("client_top5"), optional("client_macro_f1"));
        let (updates, train_loss, mean_staleness, max_staleness, bytes_up, bytes_down, rejected) = (
            optional("updates"),
            optional("train_loss"),
            optional("mean_staleness"),
            optional("max_staleness"),
            optional("bytes_up"),
            optional("bytes_down"),
            optional("rejected_updates"),
        );
        let mut records = Vec::new();
        for (i, line) in lines.enumerate().filter(|(_, l)| !l.trim().is_empty()) {
            let cells: Vec<&str> = line.split(',').collect();
            let cell = |c: usize| -> Result<f64, String> {
                let s = cells.get(c).copied().unwrap_or_default();
                s.parse().map_err(|_| format!("line {}, column `{}`: expected a number, got `{s}`", i + 2, header[c]))
            };
            let number = |c: Option<usize>| c.map_or(Ok(f64::NAN), cell);
            let count = |c: Option<usize>| c.map_or(Ok(0.0), cell).map(|v| v as u64);
            records.push(EvalRecord {
                virtual_time_s: cell(time)?,
                version: cell(version)? as u64,
                updates: count(updates)?,
                accuracy: cell(accuracy)?,
                loss: cell(loss)?,
                top5: number(top5)?,
                macro_f1: number(macro_f1)?,
                resource_utilization: number(utilization)?,
                client_accuracy: number(client_accuracy)?,
                client_top5: number(client_top5)?,
                client_macro_f1: number(client_macro_f1)?,
                train_loss: number(train_loss)?,
                mean_staleness: number(mean_staleness)?,
                max_staleness: count(max_staleness)?,
                bytes_up: number(bytes_up)?,
                bytes_down: number(bytes_down)?,
                rejected_updates: count(rejected)?,
            });
        }
        Ok(records)
    }

    /// Whether this evaluation ran the test set (`[eval] test_every` skips it in between).
    pub fn tested(&self) -> bool {
        !(self.accuracy.is_nan() && self.loss.is_nan())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(version: u64, accuracy: f64) -> EvalRecord {
        EvalRecord {
            virtual_time_s: 1.5 * version as f64,
            version,
            updates: 10 * version,
            accuracy,
            loss: 0.5,
            top5: 0.75,
            macro_f1: 0.375,
            resource_utilization: 0.625,
            client_accuracy: 0.5,
            client_top5: 0.875,
            client_macro_f1: 0.25,
            train_loss: f64::NAN,
            mean_staleness: 0.25,
            max_staleness: 2,
            bytes_up: 1e6,
            bytes_down: 2e6,
            rejected_updates: 1,
        }
    }

    #[test]
    fn rows_written_read_back_the_same() {
        let records = [record(0, 0.125), record(1, f64::NAN)];
        let text: String = std::iter::once(EvalRecord::CSV_HEADER.to_string())
            .chain(records.iter().map(EvalRecord::csv_row))
            .collect::<Vec<_>>()
            .join("\n");
        let mut back = EvalRecord::read_csv(&text).unwrap();
        assert_eq!(back.len(), 2);
        assert!(back.iter().all(|r| r.train_loss.is_nan()));
        // NaN ≠ NaN: compare the rest with the NaN fields set equal.
        let fill = |mut r: EvalRecord| {
            r.train_loss = -1.0;
            if r.accuracy.is_nan() {
                r.accuracy = -1.0;
            }
            r
        };
        back = back.into_iter().map(fill).collect();
        assert_eq!(back, records.map(fill));
        assert!(record(1, f64::NAN).tested(), "its loss is there");
    }

    #[test]
    fn an_older_file_lacks_columns_and_reads_with_defaults() {
        let back = EvalRecord::read_csv("version,virtual_time_s,accuracy,loss\n3,4.5,0.75,NaN\n").unwrap();
        let r = &back[0];
        assert_eq!((r.version, r.virtual_time_s, r.accuracy, r.updates, r.max_staleness), (3, 4.5, 0.75, 0, 0));
        assert!(r.loss.is_nan() && r.train_loss.is_nan() && r.bytes_up.is_nan());
        assert!(r.top5.is_nan() && r.macro_f1.is_nan() && r.resource_utilization.is_nan());
        assert!(r.client_accuracy.is_nan() && r.client_top5.is_nan() && r.client_macro_f1.is_nan());
        // A record serialised before the top-5 and macro-F1 scores existed (a checkpoint).
        let json = r#"{"virtual_time_s":1.0,"version":1,"updates":2,"accuracy":0.5,"loss":1.0,"train_loss":1.0,"mean_staleness":0.0,"max_staleness":0,"bytes_up":0.0,"bytes_down":0.0,"rejected_updates":0}"#;
        let old: EvalRecord = serde_json::from_str(json).unwrap();
        assert!(old.top5.is_nan() && old.macro_f1.is_nan() && old.resource_utilization.is_nan());
        assert!(old.client_accuracy.is_nan());
    }

    #[test]
    fn errors_name_the_line_and_the_column() {
        assert_eq!(EvalRecord::read_csv("version,accuracy,loss\n").unwrap_err(), "no `virtual_time_s` column");
        let err = EvalRecord::read_csv("virtual_time_s,version,accuracy,loss\n1,0,0.5,1\n2,x,0.5,1\n").unwrap_err();
        assert_eq!(err, "line 3, column `version`: expected a number, got `x`");
    }
}
