//! What a script step can see: only its own workspace and the variables it was given.

use crate::support::{text, Overture};

#[test]
fn a_step_sees_neither_the_data_directory_nor_root_nor_other_workspaces_and_only_its_variables() {
    let overture = Overture::new();
    let data = overture.data_dir();
    let data = data.to_str().expect("path");
    let file = overture.blueprint(
        "peek.yaml",
        &format!(
            r#"
name: peek
params: {{ shown: {{ default: "yes" }} }}
steps:
  holder:
    run: script
    with: {{ command: 'echo private > mine.txt; sleep 1' }}
  peeker:
    run: script
    with:
      command: |
        ls {data} >/dev/null 2>&1 && echo "data=visible" >> "$OVERTURE_OUTPUTS"
        cat {data}/overture.db >/dev/null 2>&1 && echo "db=readable" >> "$OVERTURE_OUTPUTS"
        ls /root >/dev/null 2>&1 && echo "root=visible" >> "$OVERTURE_OUTPUTS"
        cat {data}/sandboxes/*/work/mine.txt >/dev/null 2>&1 && echo "neighbour=readable" >> "$OVERTURE_OUTPUTS"
        touch /usr/overture-was-here 2>/dev/null && echo "usr=writable" >> "$OVERTURE_OUTPUTS"
        echo "param={{{{ params.shown }}}}" >> "$OVERTURE_OUTPUTS"
        echo "env=$(env | cut -d= -f1 | grep -v -x -e PWD -e SHLVL -e _ | sort | tr '\n' ,)" >> "$OVERTURE_OUTPUTS"
"#
        ),
    );
    let (code, status, output) = overture.deploy(&file, &[]);
    assert_eq!(code, 0, "{}", text(&output.stderr));
    let outputs = &status["steps"]["peeker"]["outputs"];
    assert_eq!(
        outputs
            .as_object()
            .expect("outputs")
            .keys()
            .cloned()
            .collect::<Vec<_>>(),
        ["env", "param"],
        "the step saw something it must not: {outputs}"
    );
    assert_eq!(outputs["param"], "yes");
    assert_eq!(
        outputs["env"],
        "HOME,OVERTURE_ATTEMPT,OVERTURE_DEPLOYMENT,OVERTURE_OUTPUTS,OVERTURE_REF_1,OVERTURE_STEP,PATH,",
        "only the variables it was given"
    );
    assert!(!std::path::Path::new("/usr/overture-was-here").exists());
}
