// A Kafka Connect source connector for tests/integration/test_java_apps.py: each line of "file" becomes one record
// (a String value) of "topic"; the source offset is the number of lines read, so a restarted task (on any worker)
// resumes after the last committed line. One task. (Kafka's connect-file FileStreamSource does the same with a
// byte position; connect-file 4.4.0 is not on the Maven mirror the tests resolve from.)
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import org.apache.kafka.common.config.ConfigDef;
import org.apache.kafka.connect.connector.Task;
import org.apache.kafka.connect.data.Schema;
import org.apache.kafka.connect.errors.ConnectException;
import org.apache.kafka.connect.source.SourceConnector;
import org.apache.kafka.connect.source.SourceRecord;
import org.apache.kafka.connect.source.SourceTask;

public class LineFileSource extends SourceConnector {
    static final ConfigDef CONFIG = new ConfigDef()
        .define("file", ConfigDef.Type.STRING, ConfigDef.Importance.HIGH, "the file to read")
        .define("topic", ConfigDef.Type.STRING, ConfigDef.Importance.HIGH, "the topic to write");
    private Map<String, String> props;

    @Override public void start(Map<String, String> props) { this.props = props; }
    @Override public Class<? extends Task> taskClass() { return LineTask.class; }
    @Override public List<Map<String, String>> taskConfigs(int maxTasks) { return List.of(props); }
    @Override public void stop() { }
    @Override public ConfigDef config() { return CONFIG; }
    @Override public String version() { return "1"; }

    public static class LineTask extends SourceTask {
        private Path file;
        private String topic;
        private long next;  // the number of lines already turned into records

        @Override public String version() { return "1"; }

        @Override public void start(Map<String, String> props) {
            file = Path.of(props.get("file"));
            topic = props.get("topic");
            Map<String, Object> offset = context.offsetStorageReader().offset(partition());
            next = offset == null ? 0 : ((Number) offset.get("line")).longValue();
        }

        private Map<String, String> partition() { return Collections.singletonMap("file", file.toString()); }

        @Override public List<SourceRecord> poll() throws InterruptedException {
            List<String> lines;
            try {
                lines = Files.exists(file) ? Files.readAllLines(file, StandardCharsets.UTF_8) : List.of();
            } catch (IOException e) {
                throw new ConnectException(e);
            }
            // only whole lines: the last one counts once the file ends with a newline
            long whole = lines.size();
            try {
                if (whole > 0 && Files.size(file) > 0) {
                    byte[] bytes = Files.readAllBytes(file);
                    if (bytes[bytes.length - 1] != '\n') whole--;
                }
            } catch (IOException e) {
                throw new ConnectException(e);
            }
            if (whole <= next) {
                Thread.sleep(100);
                return null;
            }
            List<SourceRecord> out = new ArrayList<>();
            for (long i = next; i < whole && out.size() < 100; i++) {
                out.add(new SourceRecord(partition(), Collections.singletonMap("line", i + 1), topic, null,
                                         Schema.STRING_SCHEMA, lines.get((int) i)));
            }
            next += out.size();
            return out;
        }

        @Override public void stop() { }
    }
}
