// Kafka 4.4's kafka-share-groups (ShareGroupCommand) run several times in one JVM, for
// tests/differential/test_tools.py (a JVM start costs 5-10 s on the test machine).
//
//   java -cp <kafka classpath>:<dir> ShareGroupTool BOOTSTRAP GROUP OPTIONS...
//
// Each OPTIONS is one space-separated set of the tool's options (e.g. "--describe --state --verbose"),
// run as "--bootstrap-server BOOTSTRAP --group GROUP OPTIONS"; before its output the line "=== OPTIONS".
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import org.apache.kafka.tools.consumer.group.ShareGroupCommand;

public class ShareGroupTool {
    public static void main(String[] args) {
        for (int i = 2; i < args.length; i++) {
            List<String> command = new ArrayList<>(List.of("--bootstrap-server", args[0], "--group", args[1]));
            command.addAll(Arrays.asList(args[i].split(" ")));
            System.out.println("=== " + args[i]);
            ShareGroupCommand.main(command.toArray(new String[0]));
            System.out.println();
            System.out.flush();
        }
        System.exit(0);
    }
}
